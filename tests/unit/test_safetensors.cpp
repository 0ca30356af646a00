// The safetensors reader on headers built byte by byte: what a valid file gives (views into the
// mapping, tensors in data order, metadata) and the error for each way a header can be wrong.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>

#include "meshnn/io/safetensors.hpp"
#include "support/test_helpers.hpp"

namespace meshnn {
namespace {

// A file of the 8-byte little-endian header length, `header`, then `data`.
std::string write_file(const std::string& name, const std::string& header, const std::string& data) {
  const std::string path = ::testing::TempDir() + "meshnn_st_" + std::to_string(getpid()) + "_" + name + ".safetensors";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  std::ofstream(path, std::ios::binary) << bytes << header << data;
  return path;
}

std::string error_for(const std::string& name, const std::string& header, const std::string& data) {
  const std::string path = write_file(name, header, data);
  const std::string message = testing::error_message_of([&] { io::SafetensorsFile f(path); });
  std::remove(path.c_str());
  return message;
}

TEST(Safetensors, ValidFileGivesViewsInDataOrder) {
  // "b" comes first in the data though second in the header; an empty tensor shares an offset.
  const std::string header =
      R"({"__metadata__": {"format": "pt"}, "a": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},)"
      R"( "b": {"dtype": "BF16", "shape": [2, 1], "data_offsets": [0, 4]},)"
      R"( "empty": {"dtype": "F16", "shape": [0, 3], "data_offsets": [4, 4]}})";
  std::string data = "\x01\x02\x03\x04";
  const float values[2] = {1.5f, -2.0f};
  data.append(reinterpret_cast<const char*>(values), sizeof(values));
  const std::string path = write_file("valid", header, data);
  {
    const io::SafetensorsFile f(path);
    ASSERT_EQ(f.tensors().size(), 3u);
    EXPECT_EQ(f.tensors()[0].name, "b");
    EXPECT_EQ(f.metadata().at("format"), "pt");
    const io::SafetensorsTensor* a = f.find("a");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->shape, (std::vector<int64_t>{2}));
    EXPECT_EQ(a->elements(), 2);
    float read[2];
    ASSERT_EQ(f.bytes(*a).size(), sizeof(read));
    std::memcpy(read, f.bytes(*a).data(), sizeof(read));
    EXPECT_EQ(read[0], 1.5f);
    EXPECT_EQ(read[1], -2.0f);
    EXPECT_EQ(static_cast<char>(f.bytes(*f.find("b"))[3]), '\x04');
    EXPECT_EQ(f.find("empty")->elements(), 0);
    EXPECT_EQ(f.find("missing"), nullptr);
    f.release(*a);  // the view stays readable afterwards (the pages come back from the file)
    std::memcpy(read, f.bytes(*a).data(), sizeof(read));
    EXPECT_EQ(read[1], -2.0f);
  }
  std::remove(path.c_str());
}

TEST(Safetensors, EachBrokenHeaderIsAClearError) {
  const std::string data(16, '\0');
  struct Case {
    const char* name;
    std::string header, expect;
  };
  const Case cases[] = {
      {"empty_header", "", "not valid JSON"},
      {"not_object", "[1, 2]", "not an object"},
      {"metadata_not_string", R"({"__metadata__": {"x": 1}})", "__metadata__ 'x' is not a string"},
      {"no_dtype", R"({"t": {"shape": [1], "data_offsets": [0, 4]}})", "tensor 't' has no 'dtype'"},
      {"negative_dim", R"({"t": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", "not a non-negative integer"},
      {"offsets_arity", R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", "needs data_offsets"},
      {"begin_after_end", R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})", "outside the data section"},
      {"past_the_data", R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [12, 20]}})", "outside the data section"},
      {"huge_shape", R"({"t": {"dtype": "F32", "shape": [281474976710656, 281474976710656], "data_offsets": [0, 4]}})",
       "impossible shape"},
      {"bytes_vs_shape", R"({"t": {"dtype": "F16", "shape": [3], "data_offsets": [0, 4]}})", "= 6 bytes"},
      {"unknown_dtype", R"({"t": {"dtype": "F12", "shape": [1], "data_offsets": [0, 2]}})", "unknown dtype 'F12'"},
      {"overlap", R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "u": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
       "overlap"},
  };
  for (const Case& c : cases) {
    const std::string message = error_for(c.name, c.header, data);
    EXPECT_NE(message.find(c.expect), std::string::npos) << c.name << ": " << message;
    EXPECT_NE(message.find(c.name), std::string::npos) << c.name << ": the message names the file: " << message;
  }
  // A length beyond the file, a file shorter than the length field, a directory.
  const std::string path = write_file("beyond", "{}", "");
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.write("\xff\x00\x00\x00\x00\x00\x00\x00", 8);
  }
  EXPECT_NE(testing::error_message_of([&] { io::SafetensorsFile f(path); }).find("is beyond the file"), std::string::npos);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << "abc";
  EXPECT_NE(testing::error_message_of([&] { io::SafetensorsFile f(path); }).find("too short"), std::string::npos);
  std::remove(path.c_str());
  EXPECT_NE(testing::error_message_of([&] { io::SafetensorsFile f(::testing::TempDir()); }).find("not a regular file"),
            std::string::npos);
}

}  // namespace
}  // namespace meshnn
