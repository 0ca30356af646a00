#include "meshnn/serving/json_cursor.hpp"

#include <algorithm>
#include <limits>

namespace meshnn::serving {

using Kind = JsonGrammar::Kind;

namespace {

// Every kind starts in phase 0: whitespace may come, then the value's first character.
constexpr uint8_t kStart = 0;
// OBJECT
constexpr uint8_t kObjectOpen = 1, kObjectKey = 2, kObjectColon = 3, kObjectAfterValue = 4, kObjectAfterComma = 5;
// ARRAY
constexpr uint8_t kArrayOpen = 1, kArrayAfterValue = 2, kArrayAfterComma = 3;
// STRING (and a key of an object of any keys, whose frame has node -1)
constexpr uint8_t kStringBody = 1, kStringEscape = 2, kStringHex = 3, kStringUtf8 = 4, kStringLowBackslash = 5,
                  kStringLowU = 6, kStringLowHex = 7;
// NUMBER and INTEGER
constexpr uint8_t kNumberMinus = 1, kNumberZero = 2, kNumberInt = 3, kNumberDot = 4, kNumberFrac = 5, kNumberE = 6,
                  kNumberExpSign = 7, kNumberExp = 8;
// LITERALS
constexpr uint8_t kLiteralMatch = 1;
// TAGGED (then the chosen OBJECT's phases)
constexpr uint8_t kTagOpen = 1, kTagKey = 2, kTagColon = 3, kTagValue = 4;

constexpr int32_t kKeyString = -1;  // the node of a frame writing a key of an object of any keys

bool is_space(uint8_t b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r'; }
bool is_digit(uint8_t b) { return b >= '0' && b <= '9'; }
int hex_value(uint8_t b) {
  if (b >= '0' && b <= '9') return b - '0';
  if (b >= 'a' && b <= 'f') return b - 'a' + 10;
  if (b >= 'A' && b <= 'F') return b - 'A' + 10;
  return -1;
}

// Of texts[lo, hi), which share their first `matched` bytes and are sorted, those whose next byte
// is `b`: a contiguous range.
std::pair<uint32_t, uint32_t> narrow(const std::vector<std::string>& texts, uint32_t lo, uint32_t hi, size_t matched,
                                     uint8_t b) {
  auto byte_at = [matched](const std::string& t) { return t.size() > matched ? static_cast<uint8_t>(t[matched]) : -1; };
  const auto begin = texts.begin() + lo, end = texts.begin() + hi;
  const auto first = std::partition_point(begin, end, [&](const std::string& t) { return byte_at(t) < b; });
  const auto last = std::partition_point(first, end, [&](const std::string& t) { return byte_at(t) == b; });
  return {static_cast<uint32_t>(first - texts.begin()), static_cast<uint32_t>(last - texts.begin())};
}

}  // namespace

JsonCursor::JsonCursor(const JsonGrammar& grammar) : grammar_(&grammar) {
  if (grammar.prefix().empty()) push(grammar.root(), kStart);
}

bool JsonCursor::in_string_text() const {
  if (depth_ == 0) return false;
  const Frame& f = frames_[static_cast<size_t>(depth_ - 1)];
  if (f.phase != kStringBody) return false;
  if (f.node == kKeyString) return true;
  const JsonGrammar::Node& n = grammar_->node(f.node);
  // A string of bounded length may not take every whole character.
  return n.kind == Kind::STRING && n.max_length == std::numeric_limits<int64_t>::max();
}

bool JsonCursor::may_end() const {
  if (!grammar_->raw() || depth_ != 1) return false;
  const Frame& f = frames_[0];
  return f.phase == kLiteralMatch && grammar_->node(f.node).literals[f.lo].size() == f.matched;
}

std::string JsonCursor::forced_bytes(size_t max_bytes) const {
  std::string forced;
  JsonCursor at(*this), next(*this);
  while (forced.size() < max_bytes && !at.complete() && !at.may_end()) {
    int only = -1;
    for (int byte = 0; byte < 256; ++byte) {
      next.copy_from(at);
      if (!next.feed(static_cast<uint8_t>(byte)) || next.spaced_) continue;
      if (only >= 0) return forced;  // a choice
      only = byte;
    }
    if (only < 0) return forced;
    at.feed(static_cast<uint8_t>(only));
    forced.push_back(static_cast<char>(only));
  }
  return forced;
}

bool JsonCursor::complete() const {
  return depth_ == 0 && prefix_at_ == grammar_->prefix().size() && suffix_at_ == grammar_->suffix().size();
}

void JsonCursor::copy_from(const JsonCursor& other) {
  grammar_ = other.grammar_;
  depth_ = other.depth_;
  prefix_at_ = other.prefix_at_;
  suffix_at_ = other.suffix_at_;
  containers_ = other.containers_;
  indent_ = other.indent_;
  line_broken_ = other.line_broken_;
  std::copy_n(other.frames_.begin(), depth_, frames_.begin());
}

bool JsonCursor::push(int32_t node, uint8_t phase) {
  if (depth_ == kMaxJsonDepth) return false;
  frames_[static_cast<size_t>(depth_++)] = Frame{node, phase, 0, 0, 0, 0, 0, 0};
  return true;
}

bool JsonCursor::feed(std::string_view bytes) {
  for (char c : bytes)
    if (!feed(static_cast<uint8_t>(c))) return false;
  return true;
}

bool JsonCursor::feed(uint8_t byte) {
  spaced_ = false;
  const std::string& prefix = grammar_->prefix();
  if (prefix_at_ < prefix.size()) {
    if (byte != static_cast<uint8_t>(prefix[prefix_at_])) return false;
    if (++prefix_at_ == prefix.size()) push(grammar_->root(), kStart);
    return true;
  }
  while (depth_ > 0) {
    switch (step(frames_[static_cast<size_t>(depth_ - 1)], byte)) {
      case Step::TAKEN:
        if (!spaced_) {
          indent_ = 0;
          line_broken_ = false;
          if (byte == '{' || byte == '[') containers_ += opens(frames_[static_cast<size_t>(depth_ - 1)]) ? 1 : 0;
        }
        return true;
      case Step::REFUSED: return false;
      case Step::ENDED_TAKEN:
        if (closes(frames_[static_cast<size_t>(depth_ - 1)], byte)) --containers_;
        --depth_;
        indent_ = 0;
        line_broken_ = false;
        return true;
      case Step::ENDED_NOT_TAKEN: --depth_; continue;  // the enclosing value reads the byte
      case Step::PUSHED: continue;                     // the new innermost frame reads it
    }
  }
  // The value is complete: then the suffix, after whitespace as between values.
  const std::string& suffix = grammar_->suffix();
  if (suffix_at_ == suffix.size()) return false;
  if (suffix_at_ == 0 && is_space(byte)) return space(byte) == Step::TAKEN;
  if (byte != static_cast<uint8_t>(suffix[suffix_at_])) return false;
  ++suffix_at_;
  return true;
}

// The one byte that may come, and the phase it leads to.
JsonCursor::Step JsonCursor::expect(Frame& f, uint8_t byte, char wanted, uint8_t next) {
  if (byte != static_cast<uint8_t>(wanted)) return Step::REFUSED;
  f.phase = next;
  return Step::TAKEN;
}

JsonCursor::Step JsonCursor::space(uint8_t byte) {
  if (grammar_->raw()) return Step::REFUSED;  // choices are written as they are
  if (byte == '\n') {
    if (line_broken_ || indent_ > 0) return Step::REFUSED;
    line_broken_ = true;
  } else if (byte == ' ' || byte == '\t') {
    if (indent_ >= kIndentPerLevel * std::max(containers_, 1)) return Step::REFUSED;
    ++indent_;
  } else {
    return Step::REFUSED;  // '\r'
  }
  spaced_ = true;
  return Step::TAKEN;
}

// Whether the frame just took the '{' or '[' that opens it, or a key or a string ('{' inside a
// string or a literal is text).
bool JsonCursor::opens(const Frame& f) const {
  if (f.node < 0) return false;
  const Kind kind = grammar_->node(f.node).kind;
  return (kind == Kind::OBJECT && f.phase == kObjectOpen) || (kind == Kind::ARRAY && f.phase == kArrayOpen) ||
         (kind == Kind::TAGGED && f.phase == kTagOpen);
}

// Whether the frame ends with `byte` closing an object or an array (not a string or a literal).
bool JsonCursor::closes(const Frame& f, uint8_t byte) const {
  if (f.node < 0 || (byte != '}' && byte != ']')) return false;
  const Kind kind = grammar_->node(f.node).kind;
  return kind == Kind::OBJECT || kind == Kind::ARRAY;
}

JsonCursor::Step JsonCursor::step(Frame& f, uint8_t byte) {
  if (f.node == kKeyString) return step_string(f, byte);
  const JsonGrammar::Node& n = grammar_->node(f.node);
  switch (n.kind) {
    case Kind::OBJECT: return step_object(f, n, byte);
    case Kind::ARRAY: return step_array(f, n, byte);
    case Kind::STRING: return step_string(f, byte);
    case Kind::NUMBER: return step_number(f, false, byte);
    case Kind::INTEGER: return step_number(f, true, byte);
    case Kind::LITERALS: return step_literals(f, n, byte);
    case Kind::TAGGED: return step_tagged(f, n, byte);
    case Kind::CHOICE:
      if (is_space(byte)) return space(byte);
      for (int32_t a : n.alternatives)
        if (grammar_->node(a).first.test(byte)) {
          f = Frame{a, kStart, 0, 0, 0, 0, 0, 0};
          return Step::PUSHED;
        }
      return Step::REFUSED;
  }
  return Step::REFUSED;
}

JsonCursor::Step JsonCursor::step_object(Frame& f, const JsonGrammar::Node& n, uint8_t byte) {
  if (f.phase != kObjectKey && is_space(byte)) return space(byte);
  const bool listed = !n.keys.empty();
  const uint64_t all = n.keys.size() == 64 ? ~uint64_t{0} : (uint64_t{1} << n.keys.size()) - 1;
  const bool may_close = (n.required & ~f.seen) == 0;
  auto begin_key = [&] {
    if (listed) {
      f.phase = kObjectKey;
      f.lo = 0;
      f.hi = static_cast<uint32_t>(n.keys.size());
      f.matched = 0;
      return Step::TAKEN;
    }
    if (n.any_key_value < 0) return Step::REFUSED;
    f.phase = kObjectColon;
    return push(kKeyString, kStringBody) ? Step::TAKEN : Step::REFUSED;
  };
  switch (f.phase) {
    case kStart:
      return expect(f, byte, '{', kObjectOpen);
    case kObjectOpen:
      if (byte == '}' && may_close) return Step::ENDED_TAKEN;
      return byte == '"' ? begin_key() : Step::REFUSED;
    case kObjectAfterValue:
      if (byte == '}' && may_close) return Step::ENDED_TAKEN;
      if (byte == ',' && (!listed || f.seen != all)) {
        f.phase = kObjectAfterComma;
        return Step::TAKEN;
      }
      return Step::REFUSED;
    case kObjectAfterComma: return byte == '"' ? begin_key() : Step::REFUSED;
    case kObjectKey: {
      const auto [lo, hi] = narrow(n.keys, f.lo, f.hi, f.matched, byte);
      bool unseen = false;
      for (uint32_t k = lo; k < hi && !unseen; ++k) unseen = (f.seen >> k & 1) == 0;
      if (!unseen) return Step::REFUSED;
      f.lo = lo;
      f.hi = hi;
      ++f.matched;
      // A key's text ends with its closing quote, which no other key has at that place.
      if (n.keys[lo].size() == f.matched) {
        f.seen |= uint64_t{1} << lo;
        f.count = lo;
        f.phase = kObjectColon;
      }
      return Step::TAKEN;
    }
    case kObjectColon:
      if (byte != ':') return Step::REFUSED;
      f.phase = kObjectAfterValue;
      return push(listed ? n.key_values[static_cast<size_t>(f.count)] : n.any_key_value, kStart) ? Step::TAKEN
                                                                                                   : Step::REFUSED;
  }
  return Step::REFUSED;
}

// The discriminator's key first, then its value; that value's object takes over the frame, as
// if it had written them itself.
JsonCursor::Step JsonCursor::step_tagged(Frame& f, const JsonGrammar::Node& n, uint8_t byte) {
  const std::string& key = n.keys.front();
  const bool spaced = f.phase != kTagKey && !(f.phase == kTagValue && f.matched > 0);
  if (spaced && is_space(byte)) return space(byte);
  switch (f.phase) {
    case kStart:
      return expect(f, byte, '{', kTagOpen);
    case kTagOpen:
      return expect(f, byte, '"', kTagKey);
    case kTagKey:
      if (f.matched >= key.size() || static_cast<uint8_t>(key[f.matched]) != byte) return Step::REFUSED;
      if (++f.matched == key.size()) {
        f.phase = kTagColon;
        f.matched = 0;
      }
      return Step::TAKEN;
    case kTagColon:
      if (byte != ':') return Step::REFUSED;
      f.phase = kTagValue;
      f.lo = 0;
      f.hi = static_cast<uint32_t>(n.literals.size());
      return Step::TAKEN;
    case kTagValue: {
      const auto [lo, hi] = narrow(n.literals, f.lo, f.hi, f.matched, byte);
      if (lo == hi) return Step::REFUSED;
      f.lo = lo;
      f.hi = hi;
      // The values are strings: each ends with its closing quote, which no other has there.
      if (n.literals[lo].size() != ++f.matched) return Step::TAKEN;
      const int32_t chosen = n.alternatives[lo];
      const std::vector<std::string>& keys = grammar_->node(chosen).keys;
      const auto at = std::lower_bound(keys.begin(), keys.end(), key) - keys.begin();
      f = Frame{chosen, kObjectAfterValue, 0, 0, 0, 0, uint64_t{1} << at, at};
      return Step::TAKEN;
    }
  }
  return Step::REFUSED;
}

JsonCursor::Step JsonCursor::step_array(Frame& f, const JsonGrammar::Node& n, uint8_t byte) {
  if (is_space(byte)) return space(byte);
  auto begin_item = [&] {
    f.phase = kArrayAfterValue;
    ++f.count;
    return push(n.items, kStart) ? Step::PUSHED : Step::REFUSED;
  };
  switch (f.phase) {
    case kStart:
      return expect(f, byte, '[', kArrayOpen);
    case kArrayOpen:
      if (byte == ']' && n.min_items == 0) return Step::ENDED_TAKEN;
      return n.max_items > 0 && n.items >= 0 ? begin_item() : Step::REFUSED;
    case kArrayAfterValue:
      if (byte == ']' && f.count >= n.min_items) return Step::ENDED_TAKEN;
      if (byte == ',' && f.count < n.max_items) {
        f.phase = kArrayAfterComma;
        return Step::TAKEN;
      }
      return Step::REFUSED;
    case kArrayAfterComma: return begin_item();
  }
  return Step::REFUSED;
}

JsonCursor::Step JsonCursor::step_string(Frame& f, uint8_t byte) {
  // minLength and maxLength (a key of an object of any keys has none): f.count counts the
  // characters begun, each escape one, a surrogate pair one.
  int64_t min_length = 0, max_length = std::numeric_limits<int64_t>::max();
  if (f.node != kKeyString) {
    min_length = grammar_->node(f.node).min_length;
    max_length = grammar_->node(f.node).max_length;
  }
  if (f.phase == kStringBody && byte != '"') {
    if (f.count >= max_length) return Step::REFUSED;
    ++f.count;  // a byte refused below leaves the frame unused
  }
  switch (f.phase) {
    case kStart:
      if (is_space(byte)) return space(byte);
      return expect(f, byte, '"', kStringBody);
    case kStringBody:
      if (byte == '"') return f.count >= min_length ? Step::ENDED_TAKEN : Step::REFUSED;
      if (byte == '\\') {
        f.phase = kStringEscape;
        return Step::TAKEN;
      }
      if (byte < 0x20) return Step::REFUSED;  // control characters are escaped in JSON
      if (byte < 0x80) return Step::TAKEN;
      // A UTF-8 lead byte, and the range its next byte must be in (no overlong forms, no
      // surrogates, nothing past U+10FFFF).
      f.lo = 0x80;
      f.hi = 0xBF;
      if (byte >= 0xC2 && byte <= 0xDF) {
        f.pending = 1;
      } else if (byte >= 0xE0 && byte <= 0xEF) {
        f.pending = 2;
        if (byte == 0xE0) f.lo = 0xA0;
        if (byte == 0xED) f.hi = 0x9F;
      } else if (byte >= 0xF0 && byte <= 0xF4) {
        f.pending = 3;
        if (byte == 0xF0) f.lo = 0x90;
        if (byte == 0xF4) f.hi = 0x8F;
      } else {
        return Step::REFUSED;
      }
      f.phase = kStringUtf8;
      return Step::TAKEN;
    case kStringUtf8:
      if (byte < f.lo || byte > f.hi) return Step::REFUSED;
      f.lo = 0x80;
      f.hi = 0xBF;
      if (--f.pending == 0) f.phase = kStringBody;
      return Step::TAKEN;
    case kStringEscape:
      if (byte == 'u') {
        f.phase = kStringHex;
        f.pending = 4;
        f.seen = 0;
        return Step::TAKEN;
      }
      if (std::string_view("\"\\/bfnrt").find(static_cast<char>(byte)) == std::string_view::npos) return Step::REFUSED;
      f.phase = kStringBody;
      return Step::TAKEN;
    case kStringHex:
    case kStringLowHex: {
      const int v = hex_value(byte);
      if (v < 0) return Step::REFUSED;
      f.seen = f.seen * 16 + static_cast<uint64_t>(v);
      --f.pending;
      // A low surrogate (DC00-DFFF) only right after a high one (D800-DBFF), which must have one:
      // decided by the first two digits, so that no escape begins that cannot end.
      const bool low = f.phase == kStringLowHex;
      if (f.pending == 3 && low && f.seen != 0xD) return Step::REFUSED;
      if (f.pending == 2 && low != (f.seen >= 0xDC && f.seen <= 0xDF)) return Step::REFUSED;
      if (f.pending == 0) f.phase = !low && f.seen >= 0xD800 && f.seen <= 0xDBFF ? kStringLowBackslash : kStringBody;
      return Step::TAKEN;
    }
    case kStringLowBackslash:
      return expect(f, byte, '\\', kStringLowU);
    case kStringLowU:
      if (byte != 'u') return Step::REFUSED;
      f.phase = kStringLowHex;
      f.pending = 4;
      f.seen = 0;
      return Step::TAKEN;
  }
  return Step::REFUSED;
}

JsonCursor::Step JsonCursor::step_number(Frame& f, bool integer, uint8_t byte) {
  auto to = [&](uint8_t phase) {
    f.phase = phase;
    return Step::TAKEN;
  };
  const bool fraction = !integer && byte == '.';
  const bool exponent = !integer && (byte == 'e' || byte == 'E');
  switch (f.phase) {
    case kStart:
      if (is_space(byte)) return space(byte);
      if (byte == '-') return to(kNumberMinus);
      [[fallthrough]];
    case kNumberMinus:
      if (byte == '0') return to(kNumberZero);
      if (is_digit(byte)) return to(kNumberInt);
      return Step::REFUSED;
    case kNumberZero:
    case kNumberInt:
      if (is_digit(byte) && f.phase == kNumberInt) return Step::TAKEN;
      if (fraction) return to(kNumberDot);
      if (exponent) return to(kNumberE);
      return Step::ENDED_NOT_TAKEN;
    case kNumberDot: return is_digit(byte) ? to(kNumberFrac) : Step::REFUSED;
    case kNumberFrac:
      if (is_digit(byte)) return Step::TAKEN;
      if (exponent) return to(kNumberE);
      return Step::ENDED_NOT_TAKEN;
    case kNumberE:
      if (byte == '+' || byte == '-') return to(kNumberExpSign);
      [[fallthrough]];
    case kNumberExpSign: return is_digit(byte) ? to(kNumberExp) : Step::REFUSED;
    case kNumberExp: return is_digit(byte) ? Step::TAKEN : Step::ENDED_NOT_TAKEN;
  }
  return Step::REFUSED;
}

JsonCursor::Step JsonCursor::step_literals(Frame& f, const JsonGrammar::Node& n, uint8_t byte) {
  if (f.phase == kStart) {
    if (is_space(byte) && !grammar_->raw()) return space(byte);  // a choice may begin with one
    f.phase = kLiteralMatch;
    f.lo = 0;
    f.hi = static_cast<uint32_t>(n.literals.size());
  }
  const auto [lo, hi] = narrow(n.literals, f.lo, f.hi, f.matched, byte);
  if (lo == hi) {
    // No literal goes on with this byte: one may have ended before it (1 beside 10), the shortest
    // of those left, so the first.
    return n.literals[f.lo].size() == f.matched ? Step::ENDED_NOT_TAKEN : Step::REFUSED;
  }
  f.lo = lo;
  f.hi = hi;
  ++f.matched;
  return hi - lo == 1 && n.literals[lo].size() == f.matched ? Step::ENDED_TAKEN : Step::TAKEN;
}

}  // namespace meshnn::serving
