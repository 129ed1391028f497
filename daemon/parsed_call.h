// UnaryCall: a unary gRPC call whose request the service parses itself.
//
// gRPC 1.51's callback API answers a request that does not parse - invalid
// UTF-8 in a string field, a truncated or malformed message - with
// UNIMPLEMENTED and an empty message: CallbackUnaryHandler::RunHandler
// replaces the failed deserialization by an UnimplementedUnaryReactor, and
// the service never hears of it. The daemon therefore registers its methods
// raw (TuneService::WithRawCallbackMethod_X), and ParseCall parses the bytes
// with protobuf's own parser: a request that protobuf rejects is answered
// INVALID_ARGUMENT "the request could not be parsed as a gputune.v1.X...",
// and one it accepts is handled exactly as before.
//
//   grpc::ServerUnaryReactor* Svc::Claim(grpc::CallbackServerContext* ctx,
//                                        const grpc::ByteBuffer* in,
//                                        grpc::ByteBuffer* out) {
//     auto* call = ParseCall<v1::ClaimRequest, v1::ClaimResponse>(
//         ctx, in, out, &answer_budget);  // or null: answers not counted
//     if (call->answered()) return call;
//     ... call->request(), call->response() ...
//     call->Reply(status);  // from any thread, once
//     return call;
//   }
#ifndef GPUTUNE_DAEMON_PARSED_CALL_H_
#define GPUTUNE_DAEMON_PARSED_CALL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "daemon/answer_budget.h"
#include "google/protobuf/arena.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/callback_common.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/proto_buffer_writer.h"
#include "grpcpp/support/server_callback.h"

namespace gputune {

// The message for a request protobuf could not parse (shared with streaming
// methods).
inline std::string UnparsedRequestMessage(absl::string_view type) {
  return absl::StrCat(
      "the request could not be parsed as a ", type,
      " (it is not valid protobuf for this message, e.g. a string field holds "
      "invalid UTF-8): send a well-formed request");
}

// INVALID_ARGUMENT for a request protobuf could not parse as a Request.
template <typename Request>
absl::Status NotParsed() {
  return absl::InvalidArgumentError(
      UnparsedRequestMessage(Request::descriptor()->full_name()));
}

// Parses `in` into `message` with protobuf's parser (gRPC's serialization
// traits for protobuf messages); false when it does not parse.
template <typename Message>
bool ParseRequest(const grpc::ByteBuffer& in, Message* message) {
  grpc::ByteBuffer shared(in);  // the same slices; Deserialize consumes it
  return grpc::SerializationTraits<Message>::Deserialize(&shared, message).ok();
}

// The request of a raw method, parsed on `arena`; null when protobuf rejects
// the bytes.
template <typename Request>
Request* ParseOn(google::protobuf::Arena* arena, const grpc::ByteBuffer& in) {
  auto* request = google::protobuf::Arena::CreateMessage<Request>(arena);
  return ParseRequest(in, request) ? request : nullptr;
}

// Serializes `message` into the (empty) buffer `out`.
template <typename Message>
grpc::Status SerializeTo(const Message& message, grpc::ByteBuffer* out) {
  bool own_buffer = false;
  return grpc::SerializationTraits<Message>::Serialize(message, out,
                                                       &own_buffer);
}

template <typename Request, typename Response>
class UnaryCall final : public grpc::ServerUnaryReactor {
 public:
  // `budget` (may be null: not counted) bounds the memory of answers in
  // flight (daemon/answer_budget.h).
  UnaryCall(grpc::CallbackServerContext* ctx, grpc::ByteBuffer* out,
            AnswerBudget* budget)
      : ctx_(ctx), out_(out), budget_(budget) {}

  grpc::CallbackServerContext* context() const { return ctx_; }
  const Request& request() const { return request_; }
  Request* mutable_request() { return &request_; }
  Response* response() { return &response_; }
  // Whether Reply was called (ParseCall replies itself to a request that
  // does not parse).
  bool answered() const { return answered_; }

  // Writes the response (when status is OK) and finishes the call. Call once,
  // from any thread.
  void Reply(const absl::Status& status) {
    answered_ = true;
    if (!status.ok()) {
      Finish(grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                          std::string(status.message())));
      return;
    }
    grpc::Status serialized = SerializeTo(response_, out_);
    if (serialized.ok() && budget_ != nullptr) {
      serialized = budget_->Admit(out_, &reserved_);
    }
    Finish(serialized);
  }

  void OnDone() override {
    if (budget_ != nullptr) budget_->Release(reserved_);
    delete this;
  }

 private:
  grpc::CallbackServerContext* const ctx_;
  grpc::ByteBuffer* const out_;
  AnswerBudget* const budget_;
  size_t reserved_ = 0;  // of budget_, for the answer in flight
  Request request_;
  Response response_;
  bool answered_ = false;
};

// A call for the raw request `in`: parsed, or already answered
// INVALID_ARGUMENT when it does not parse. gRPC owns the returned reactor.
// `budget` as for UnaryCall.
template <typename Request, typename Response>
UnaryCall<Request, Response>* ParseCall(grpc::CallbackServerContext* ctx,
                                        const grpc::ByteBuffer* in,
                                        grpc::ByteBuffer* out,
                                        AnswerBudget* budget) {
  auto* call = new UnaryCall<Request, Response>(ctx, out, budget);
  if (!ParseRequest(*in, call->mutable_request())) {
    call->Reply(NotParsed<Request>());
  }
  return call;
}

}  // namespace gputune

#endif  // GPUTUNE_DAEMON_PARSED_CALL_H_
