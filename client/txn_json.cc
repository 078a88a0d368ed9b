#include "client/txn_json.h"

#include <initializer_list>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace ledgerkv::client {
namespace {

absl::Status Bad(absl::string_view path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("txn JSON: ", path, ": ", what));
}

// Refuses members of `obj` not in `allowed`.
absl::Status OnlyMembers(const JsonValue& obj, absl::string_view path,
                         std::initializer_list<absl::string_view> allowed) {
  for (const auto& [name, value] : obj.members()) {
    bool ok = false;
    for (auto a : allowed) ok = ok || name == a;
    if (!ok) {
      return Bad(path, absl::StrCat("unknown member \"", name, "\" (expected one of: ",
                                    absl::StrJoin(allowed, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status ExpectType(const JsonValue& v, JsonValue::Type type, absl::string_view path) {
  if (v.type() != type) {
    return Bad(path, absl::StrCat("expected ", JsonTypeName(type), ", got ",
                                  JsonTypeName(v.type())));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> RequiredString(const JsonValue& obj, absl::string_view name,
                                           absl::string_view path) {
  const JsonValue* v = obj.Find(name);
  std::string member_path = absl::StrCat(path, ".", name);
  if (v == nullptr) return Bad(path, absl::StrCat("missing \"", name, "\""));
  RETURN_IF_ERROR(ExpectType(*v, JsonValue::Type::kString, member_path));
  return v->string_value();
}

absl::StatusOr<int64_t> Int(const JsonValue& v, absl::string_view path) {
  RETURN_IF_ERROR(ExpectType(v, JsonValue::Type::kNumber, path));
  auto n = v.AsInt64();
  if (!n.ok()) return Bad(path, n.status().message());
  return *n;
}

absl::Status ParseCompare(const JsonValue& c, absl::string_view path, v1::Compare* out) {
  RETURN_IF_ERROR(ExpectType(c, JsonValue::Type::kObject, path));
  RETURN_IF_ERROR(OnlyMembers(c, path, {"key", "target", "result", "value", "number"}));
  ASSIGN_OR_RETURN(std::string key, RequiredString(c, "key", path));
  ASSIGN_OR_RETURN(std::string target, RequiredString(c, "target", path));
  ASSIGN_OR_RETURN(std::string result, RequiredString(c, "result", path));
  out->set_key(std::move(key));
  if (target == "value") {
    out->set_target(v1::Compare::VALUE);
  } else if (target == "version") {
    out->set_target(v1::Compare::VERSION);
  } else if (target == "create") {
    out->set_target(v1::Compare::CREATE_REVISION);
  } else if (target == "mod") {
    out->set_target(v1::Compare::MOD_REVISION);
  } else {
    return Bad(absl::StrCat(path, ".target"),
               absl::StrCat("unknown target \"", target, "\" (expected value, version, create or mod)"));
  }
  if (result == "=") {
    out->set_result(v1::Compare::EQUAL);
  } else if (result == "!=") {
    out->set_result(v1::Compare::NOT_EQUAL);
  } else if (result == "<") {
    out->set_result(v1::Compare::LESS);
  } else if (result == ">") {
    out->set_result(v1::Compare::GREATER);
  } else {
    return Bad(absl::StrCat(path, ".result"),
               absl::StrCat("unknown result \"", result, "\" (expected =, !=, < or >)"));
  }
  const JsonValue* value = c.Find("value");
  const JsonValue* number = c.Find("number");
  if (target == "value") {
    if (number != nullptr) return Bad(path, "target \"value\" takes \"value\" (a string), not \"number\"");
    if (value == nullptr) return Bad(path, "missing \"value\"");
    RETURN_IF_ERROR(ExpectType(*value, JsonValue::Type::kString, absl::StrCat(path, ".value")));
    out->set_value(value->string_value());
  } else {
    if (value != nullptr) {
      return Bad(path, absl::StrCat("target \"", target, "\" takes \"number\", not \"value\""));
    }
    if (number == nullptr) return Bad(path, "missing \"number\"");
    ASSIGN_OR_RETURN(int64_t n, Int(*number, absl::StrCat(path, ".number")));
    out->set_number(n);
  }
  return absl::OkStatus();
}

absl::Status ParseOp(const JsonValue& op, absl::string_view path, v1::TxnOp* out) {
  RETURN_IF_ERROR(ExpectType(op, JsonValue::Type::kObject, path));
  if (op.members().size() != 1) {
    return Bad(path, absl::StrCat("an op is an object with exactly one of put, get, delete, "
                                  "incr; got ", op.members().size(), " members"));
  }
  const auto& [name, body] = op.members()[0];
  const std::string body_path = absl::StrCat(path, ".", name);
  if (name != "put" && name != "get" && name != "delete" && name != "incr") {
    return Bad(path, absl::StrCat("unknown op \"", name, "\" (expected put, get, delete or incr)"));
  }
  RETURN_IF_ERROR(ExpectType(body, JsonValue::Type::kObject, body_path));
  ASSIGN_OR_RETURN(std::string key, RequiredString(body, "key", body_path));
  if (name == "put") {
    RETURN_IF_ERROR(OnlyMembers(body, body_path, {"key", "value"}));
    ASSIGN_OR_RETURN(std::string value, RequiredString(body, "value", body_path));
    out->mutable_put()->set_key(std::move(key));
    out->mutable_put()->set_value(std::move(value));
  } else if (name == "get") {
    RETURN_IF_ERROR(OnlyMembers(body, body_path, {"key"}));
    out->mutable_get()->set_key(std::move(key));
  } else if (name == "delete") {
    RETURN_IF_ERROR(OnlyMembers(body, body_path, {"key", "end"}));
    out->mutable_delete_()->set_key(std::move(key));
    if (body.Find("end") != nullptr) {
      ASSIGN_OR_RETURN(std::string end, RequiredString(body, "end", body_path));
      // On the wire an empty end means "one key": written out, it reads as
      // "to the end of the table", so it is refused rather than guessed.
      if (end.empty()) {
        return Bad(absl::StrCat(body_path, ".end"),
                   "must not be empty (leave \"end\" out to delete one key; a delete "
                   "range ends at a key)");
      }
      out->mutable_delete_()->set_end(std::move(end));
    }
  } else {
    RETURN_IF_ERROR(OnlyMembers(body, body_path, {"key", "delta"}));
    int64_t delta = 1;
    if (const JsonValue* d = body.Find("delta"); d != nullptr) {
      ASSIGN_OR_RETURN(delta, Int(*d, absl::StrCat(body_path, ".delta")));
    }
    out->mutable_increment()->set_key(std::move(key));
    out->mutable_increment()->set_delta(delta);
  }
  return absl::OkStatus();
}

absl::Status ParseOps(const JsonValue& doc, absl::string_view name,
                      google::protobuf::RepeatedPtrField<v1::TxnOp>* out) {
  const JsonValue* ops = doc.Find(name);
  if (ops == nullptr) return absl::OkStatus();
  RETURN_IF_ERROR(ExpectType(*ops, JsonValue::Type::kArray, name));
  for (size_t i = 0; i < ops->items().size(); ++i) {
    RETURN_IF_ERROR(ParseOp(ops->items()[i], absl::StrCat(name, "[", i, "]"), out->Add()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::TxnRequest> TxnFromJson(const JsonValue& doc, const std::string& table) {
  if (!doc.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("txn JSON: expected an object, got ", JsonTypeName(doc.type())));
  }
  RETURN_IF_ERROR(OnlyMembers(doc, "txn", {"compare", "success", "failure"}));
  v1::TxnRequest txn;
  txn.set_table(table);
  if (const JsonValue* compares = doc.Find("compare"); compares != nullptr) {
    RETURN_IF_ERROR(ExpectType(*compares, JsonValue::Type::kArray, "compare"));
    for (size_t i = 0; i < compares->items().size(); ++i) {
      RETURN_IF_ERROR(ParseCompare(compares->items()[i], absl::StrCat("compare[", i, "]"),
                                   txn.add_compares()));
    }
  }
  RETURN_IF_ERROR(ParseOps(doc, "success", txn.mutable_success()));
  RETURN_IF_ERROR(ParseOps(doc, "failure", txn.mutable_failure()));
  return txn;
}

absl::StatusOr<v1::TxnRequest> ParseTxnJson(absl::string_view text, const std::string& table) {
  auto doc = ParseJson(text);
  if (!doc.ok()) return absl::InvalidArgumentError(absl::StrCat("txn: ", doc.status().message()));
  return TxnFromJson(*doc, table);
}

}  // namespace ledgerkv::client
