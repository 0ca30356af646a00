// Command lines of meshnn's apps. Each app declares its options on its own CLI::App (CLI11) and
// parses through parse_command_line, so every app fails the same way: a bad command line is a
// UsageError naming the option, and since every rank parses the same argv, every rank fails alike
// and run_app prints the message once. The validators below fill in what CLI11 lacks or words
// misleadingly for meshnn's options.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "meshnn/runtime/app.hpp"

namespace meshnn {

// Parses argv into app's options. --help throws HelpRequested carrying the usage, which shows each
// option's default (the value its variable holds before the parse); every other CLI11 error throws
// UsageError with the option's name in the message. A repeated option takes its last value, so a
// wrapper can put its defaults first and the user's arguments after (scripts/run.sh).
void parse_command_line(CLI::App& app, int argc, char** argv);

// Transformer: a whole number in [min, max], passed on to CLI11 in plain decimal. A transformer
// rather than a check because CLI11's own integer conversion reads "010" as octal 8 and "0x10" as
// 16; and CLI::Range reports a value that is no number at all as "Value two not in range". This one
// takes decimal digits only and says which of the two went wrong.
class IntRange : public CLI::Validator {
 public:
  IntRange(int64_t min, int64_t max);
};

// Check: a finite number in [min, max], by default any finite number (CLI::Range lets NaN through:
// it compares false both ways).
class FiniteRange : public CLI::Validator {
 public:
  FiniteRange(double min = -std::numeric_limits<double>::max(), double max = std::numeric_limits<double>::max());
};

// Transformer: a size in [min, max] bytes with an optional K, M or G suffix (powers of 1024: "64K",
// "1M", "2G"), passed on to CLI11 as its plain decimal number. (CLI::AsSizeValue also takes "KB",
// "KiB", spaces and fractions; meshnn's size options have always meant whole bytes.)
class SizeRange : public CLI::Validator {
 public:
  SizeRange(int64_t min, int64_t max);
};

// Check: the value is one that `parse` (one of meshnn's parse functions, e.g. parse_mesh_shape)
// accepts; the meshnn::Error it throws otherwise names the accepted forms and becomes the message.
// The app converts the value with the same function after parsing, which then cannot fail.
template <class Parse>
CLI::Validator parsed_by(Parse parse, std::string description = "") {
  return CLI::Validator(
      [parse](std::string& text) -> std::string {
        try {
          (void)parse(text);
          return {};
        } catch (const Error& e) {
          return e.what();
        }
      },
      std::move(description));
}

// "123", "64K", "1M", "2G" (powers of 1024). Throws UsageError on anything else or on overflow.
int64_t parse_size(const std::string& text);

// Whole numbers in [min, max] separated by `separator`, e.g. a shape "1,1,64,256". Throws
// UsageError on an empty or malformed piece.
std::vector<int64_t> parse_int_list(const std::string& text, int64_t min, int64_t max, char separator = ',');

}  // namespace meshnn
