// Command-line options for meshnn's apps: declared once, parsed strictly. Unknown options, missing
// or malformed values and out-of-range numbers throw UsageError with the option's name, so every
// rank (which parses the same argv) fails alike. "--help" throws HelpRequested carrying the usage.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "meshnn/runtime/app.hpp"

namespace meshnn {

struct HelpRequested : Error {
  using Error::Error;
};

class OptionParser {
 public:
  OptionParser(std::string program, std::string summary);

  // --name (no value)
  void add_flag(const std::string& name, const std::string& help);
  // --name VALUE (also --name=VALUE); without a default the option is optional and has() is false.
  void add_option(const std::string& name, const std::string& value_name, const std::string& help,
                  std::optional<std::string> default_value = std::nullopt);

  void parse(int argc, char** argv);

  bool flag(const std::string& name) const;
  bool has(const std::string& name) const;
  std::string get(const std::string& name) const;  // UsageError when absent
  // Whole numbers with K/M/G suffixes (powers of 1024) accepted when `suffixes`; range-checked.
  int64_t get_int(const std::string& name, int64_t min, int64_t max, bool suffixes = false) const;
  double get_double(const std::string& name, double min, double max) const;
  // One of `choices`.
  std::string get_choice(const std::string& name, const std::vector<std::string>& choices) const;

  std::string usage() const;

 private:
  struct Spec {
    bool takes_value = false;
    std::string value_name, help;
    std::optional<std::string> default_value;
  };
  std::string program_, summary_;
  std::vector<std::string> order_;
  std::map<std::string, Spec> specs_;
  std::map<std::string, std::string> values_;
};

// Parses "123", "64K", "1M", "2G" (powers of 1024). Throws UsageError naming `what`.
int64_t parse_size(const std::string& text, const std::string& what);

// Parses a comma-separated list of whole numbers in [min, max], e.g. a shape "1,1,64,256".
// Throws UsageError naming `what`.
std::vector<int64_t> parse_int_list(const std::string& text, const std::string& what, int64_t min, int64_t max);

}  // namespace meshnn
