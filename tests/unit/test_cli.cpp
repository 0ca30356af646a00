// The apps' command-line helper: CLI11 errors become UsageError naming the option, --help becomes
// HelpRequested, and the validators take what meshnn's options always took.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "meshnn/mesh/mesh_device.hpp"
#include "meshnn/runtime/cli.hpp"

namespace meshnn {
namespace {

// An app with one option of each kind the apps use.
struct TestApp {
  CLI::App cli{"A test app.", "t"};
  int64_t n = 4, size = int64_t{1} << 20;
  double ratio = 0.5;
  std::string mode = "tp", mesh;
  bool check = false;

  TestApp() {
    cli.add_option("--n", n, "count")->transform(IntRange(1, 100));
    cli.add_option("--size", size, "bytes")->transform(SizeRange(1, int64_t{1} << 40))->default_str("1M");
    cli.add_option("--ratio", ratio, "ratio")->check(FiniteRange(0, 1));
    cli.add_option("--mode", mode, "mode")->check(CLI::IsMember({"dp", "tp"}));
    cli.add_option("--mesh", mesh, "mesh")->check(parsed_by(parse_mesh_shape));
    cli.add_flag("--check", check, "flag");
  }

  void parse(std::vector<std::string> words) {
    words.insert(words.begin(), "t");
    std::vector<char*> argv;
    for (std::string& w : words) argv.push_back(w.data());
    parse_command_line(cli, static_cast<int>(argv.size()), argv.data());
  }
};

// The UsageError message of parsing `words`, or "" when they parse.
std::string usage_error(const std::vector<std::string>& words) {
  TestApp app;
  try {
    app.parse(words);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(CommandLine, ParsesValuesFlagsAndDefaults) {
  TestApp app;
  app.parse({"--n=12", "--size", "64K", "--check", "--mode", "dp", "--ratio", "0.25", "--mesh", "2x4"});
  EXPECT_EQ(app.n, 12);
  EXPECT_EQ(app.size, 65536);
  EXPECT_TRUE(app.check);
  EXPECT_EQ(app.mode, "dp");
  EXPECT_EQ(app.ratio, 0.25);
  EXPECT_EQ(app.mesh, "2x4");
  TestApp defaults;
  defaults.parse({});
  EXPECT_EQ(defaults.n, 4);
  EXPECT_EQ(defaults.size, int64_t{1} << 20);
  EXPECT_FALSE(defaults.check);
}

TEST(CommandLine, RepeatedOptionTakesTheLastValue) {
  TestApp app;
  app.parse({"--n", "3", "--mode", "dp", "--n", "7", "--mode", "tp"});
  EXPECT_EQ(app.n, 7);
  EXPECT_EQ(app.mode, "tp");
}

TEST(CommandLine, WholeNumbersAreDecimal) {
  TestApp app;
  app.parse({"--n", "010"});  // CLI11 alone would read octal 8
  EXPECT_EQ(app.n, 10);
  EXPECT_EQ(usage_error({"--n", "0x10"}), "--n: '0x10' is not a whole number");
}

TEST(CommandLine, ErrorsNameTheOption) {
  EXPECT_EQ(usage_error({"--frobnicate"}), "unknown option '--frobnicate' (see --help)");
  EXPECT_EQ(usage_error({"--frobnicate=3"}), "unknown option '--frobnicate' (see --help)");
  EXPECT_EQ(usage_error({"extra"}), "unexpected argument 'extra' (see --help)");
  EXPECT_EQ(usage_error({"--n", "two"}), "--n: 'two' is not a whole number");
  EXPECT_EQ(usage_error({"--n", "0"}), "--n: 0 is out of range [1, 100]");
  EXPECT_EQ(usage_error({"--n", "99999999999999999999"}), "--n: '99999999999999999999' is not a whole number");
  EXPECT_EQ(usage_error({"--mode", "pp"}), "--mode: pp not in {dp,tp}");
  EXPECT_EQ(usage_error({"--ratio", "nan"}), "--ratio: 'nan' is not a finite number");
  EXPECT_EQ(usage_error({"--ratio", "1.5"}), "--ratio: 1.5 is out of range [0, 1]");
  EXPECT_NE(usage_error({"--mesh", "two"}).find("--mesh: mesh shape 'two' is not of the form RxC"), std::string::npos);
  EXPECT_NE(usage_error({"--n"}).find("--n"), std::string::npos);  // a value is missing
}

TEST(CommandLine, SizesTakeKMGSuffixes) {
  for (const auto& [text, bytes] : std::vector<std::pair<std::string, int64_t>>{
           {"123", 123}, {"64K", 64 << 10}, {"64k", 64 << 10}, {"1M", 1 << 20}, {"2G", int64_t{2} << 30}}) {
    TestApp app;
    app.parse({"--size", text});
    EXPECT_EQ(app.size, bytes) << text;
    EXPECT_EQ(parse_size(text), bytes) << text;
  }
  EXPECT_EQ(usage_error({"--size", "12Q"}),
            "--size: '12Q' is not a size (a whole number with an optional K, M or G suffix)");
  EXPECT_EQ(usage_error({"--size", "8589934592G"}), "--size: '8589934592G' is too large");
  EXPECT_EQ(usage_error({"--size", "2048G"}), "--size: 2048G is out of range [1, 1024G]");
  for (const char* bad : {"", "K", "1.5M", "-", "+1K", " 1K", "12Q", "99999999999999999999", "9223372036854775807K"})
    EXPECT_THROW(parse_size(bad), UsageError) << bad;
}

TEST(CommandLine, HelpCarriesTheUsageWithDefaults) {
  TestApp app;
  try {
    app.parse({"--help"});
    FAIL() << "no HelpRequested";
  } catch (const HelpRequested& e) {
    const std::string help = e.what();
    EXPECT_NE(help.find("A test app."), std::string::npos) << help;
    EXPECT_NE(help.find("--n INT:in [1, 100]=4"), std::string::npos) << help;
    EXPECT_NE(help.find("--size INT:bytes in [1, 1024G] (K, M, G: x1024)=1M"), std::string::npos) << help;
    EXPECT_NE(help.find("{dp,tp}=tp"), std::string::npos) << help;
    EXPECT_NE(help.find("--check"), std::string::npos) << help;
  }
}

TEST(CommandLine, IntListsTakeASeparator) {
  EXPECT_EQ(parse_int_list("1,1,64,256", 1, 1 << 20), (std::vector<int64_t>{1, 1, 64, 256}));
  EXPECT_EQ(parse_int_list("128x4544x18176", 1, 1 << 20, 'x'), (std::vector<int64_t>{128, 4544, 18176}));
  EXPECT_EQ(parse_int_list("-8", -8, 8), std::vector<int64_t>{-8});
  for (const char* bad : {"", "1,,2", "1,", ",1", "1, 2", "0,1", "1,2x", "two"})
    EXPECT_THROW(parse_int_list(bad, 1, 1 << 20), UsageError) << bad;
}

}  // namespace
}  // namespace meshnn
