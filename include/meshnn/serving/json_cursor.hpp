// Where an answer stands in its JsonGrammar (json_grammar.hpp), byte by byte: a pushdown
// recognizer whose stack holds one frame per open value (the root object, a property's array, a
// string in it, ...). It tells whether a byte may come next, which is all constrained decoding
// asks (token_mask.hpp feeds each candidate token's bytes to a copy).
//
// Copies are cheap and allocate nothing: a frame is a few dozen bytes, and copy_from() copies only
// the frames in use.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "meshnn/serving/json_grammar.hpp"

namespace meshnn::serving {

class JsonCursor {
 public:
  // Before the root value (whitespace may come first). The grammar must outlive the cursor.
  explicit JsonCursor(const JsonGrammar& grammar);

  // Takes the next byte of the answer if the grammar allows it there. Returns false if not; the
  // cursor is then in no defined state (feed a copy when trying).
  bool feed(uint8_t byte);
  bool feed(std::string_view bytes);
  // The root value is closed, and the grammar's suffix written: nothing may follow.
  bool complete() const;
  // A choice (JsonGrammar::choice) is written whole, and a longer one goes on from it: the answer
  // may end here (on a stop token) or go on.
  bool may_end() const;
  // The next bytes go on a string's text of unbounded length, with no escape or character begun:
  // whole characters (but '"' and control characters) and whole escapes are taken, and leave the
  // cursor as it is.
  bool in_string_text() const;
  // The bytes that come next whatever the answer goes on to say, written compactly (no whitespace
  // between values, which is never required): they stop where two bytes could come (the model's
  // choice), where the value is complete or a choice may end, or at `max_bytes`. Jump-forward
  // decoding writes them without asking the model (generator.hpp).
  std::string forced_bytes(size_t max_bytes) const;

  // This cursor becomes `other` (same grammar), copying only the frames in use.
  void copy_from(const JsonCursor& other);
  JsonCursor(const JsonCursor& other) { copy_from(other); }
  JsonCursor& operator=(const JsonCursor& other) {
    copy_from(other);
    return *this;
  }

 private:
  // One open value. Which fields mean what depends on the node's kind (json_cursor.cpp).
  struct Frame {
    int32_t node;
    uint8_t phase;
    uint8_t pending;  // string: UTF-8 continuation bytes or \u hex digits still due
    uint16_t matched;  // LITERALS and listed keys: bytes matched so far
    uint32_t lo, hi;   // LITERALS and listed keys: candidates [lo, hi); UTF-8: the next byte's range
    uint64_t seen;     // OBJECT: the listed keys written; string: a \u escape's value so far
    int64_t count;     // ARRAY: items begun; OBJECT: the key being written (listed keys)
  };
  enum class Step : uint8_t { TAKEN, REFUSED, ENDED_TAKEN, ENDED_NOT_TAKEN, PUSHED };

  Step step(Frame& f, uint8_t byte);
  Step step_object(Frame& f, const JsonGrammar::Node& n, uint8_t byte);
  Step step_array(Frame& f, const JsonGrammar::Node& n, uint8_t byte);
  Step step_string(Frame& f, uint8_t byte);
  Step step_number(Frame& f, bool integer, uint8_t byte);
  Step step_literals(Frame& f, const JsonGrammar::Node& n, uint8_t byte);
  Step step_tagged(Frame& f, const JsonGrammar::Node& n, uint8_t byte);
  Step space(uint8_t byte);  // whitespace between values: "\n" first, then indentation
  static Step expect(Frame& f, uint8_t byte, char wanted, uint8_t next);
  bool push(int32_t node, uint8_t phase);
  bool opens(const Frame& f) const;
  bool closes(const Frame& f, uint8_t byte) const;

  const JsonGrammar* grammar_ = nullptr;
  int32_t depth_ = 0;
  size_t prefix_at_ = 0, suffix_at_ = 0;  // bytes of the grammar's prefix and suffix written
  int32_t containers_ = 0;  // objects and arrays open
  int32_t indent_ = 0;      // spaces and tabs just taken between values
  bool line_broken_ = false;  // the whitespace just taken between values holds a line break
  bool spaced_ = false;       // the byte being fed was taken as such whitespace
  std::array<Frame, kMaxJsonDepth> frames_;
};

}  // namespace meshnn::serving
