#include "ledger/ledger_writer.h"

#include <utility>

#include "absl/synchronization/notification.h"
#include "ledger/writer_state.h"

namespace ledgerkv::ledger {

LedgerWriter::LedgerWriter(uint64_t id, std::shared_ptr<WriterState> state)
    : id_(id), state_(std::move(state)) {}

LedgerWriter::~LedgerWriter() { state_->Shutdown(); }

int64_t LedgerWriter::lac() const { return state_->lac(); }

meta::v1::LedgerMetadata LedgerWriter::metadata() const { return state_->metadata(); }

WriterStats LedgerWriter::stats() const { return state_->stats(); }

void LedgerWriter::AppendAsync(std::string_view payload, AddCallback done) {
  state_->AppendAsync(payload, std::move(done));
}

void LedgerWriter::SendHeldAppends() { state_->SendHeldAppends(); }

absl::StatusOr<int64_t> LedgerWriter::Append(std::string_view payload) {
  absl::Notification added;
  absl::StatusOr<int64_t> result;
  state_->AppendAsync(payload, [&](absl::StatusOr<int64_t> r) {
    result = std::move(r);
    added.Notify();
  });
  added.WaitForNotification();
  return result;
}

absl::Status LedgerWriter::Close() { return state_->Close(); }

}  // namespace ledgerkv::ledger
