// CRC-32C against published check values, TFRecord framing, and the events-file writer's file handling
// (new file per start, never an existing one, names that sort after earlier files). Torch-free. The
// protobuf content is checked by TensorBoard's own reader in tests/py/test_tensorboard.py.
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "drope/core/crc32c.h"
#include "drope/core/tfevents.h"
#include "test_util.h"

namespace fs = std::filesystem;
using drope::test::expect_error;
using drope::test::tmp_dir;

namespace {

std::string bytes(std::initializer_list<int> v) {
  std::string s;
  for (int b : v) s.push_back(static_cast<char>(b));
  return s;
}

uint64_t le(const std::string& s, size_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

}  // namespace

// RFC 3720 (iSCSI) appendix B.4 test vectors, and the CRC catalogue's check value of "123456789".
TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(drope::crc32c(""), 0u);
  EXPECT_EQ(drope::crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(drope::crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(drope::crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string up, down;
  for (int i = 0; i < 32; ++i) up.push_back(static_cast<char>(i)), down.push_back(static_cast<char>(31 - i));
  EXPECT_EQ(drope::crc32c(up), 0x46DD794Eu);
  EXPECT_EQ(drope::crc32c(down), 0x113FDB5Cu);
  const std::string read10 =
      bytes({0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
             0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18,
             0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00});
  EXPECT_EQ(drope::crc32c(read10), 0xD9963A56u);
}

TEST(Crc32c, ExtendsAcrossPieces) {
  const std::string a = "hello, ", b = "tensorboard";
  EXPECT_EQ(drope::crc32c(b, drope::crc32c(a)), drope::crc32c(a + b));
}

// The mask of TFRecord files (a rotation by 15 bits plus 0xa282ead8): its inverse restores the CRC.
TEST(Crc32c, MaskIsTheDocumentedRotation) {
  for (uint32_t crc : {0u, 1u, 0xE3069283u, 0xFFFFFFFFu}) {
    const uint32_t rot = drope::mask_crc32c(crc) - 0xa282ead8u;
    EXPECT_EQ((rot >> 17) | (rot << 15), crc);
  }
  EXPECT_EQ(drope::mask_crc32c(0), 0xa282ead8u);
}

TEST(TfEvents, RecordFraming) {
  const std::string data = "brain.Event:2";
  const std::string r = drope::tfrecord(data);
  ASSERT_EQ(r.size(), 8 + 4 + data.size() + 4);
  EXPECT_EQ(le(r, 0, 8), data.size());
  EXPECT_EQ(le(r, 8, 4), drope::mask_crc32c(drope::crc32c(r.substr(0, 8))));
  EXPECT_EQ(r.substr(12, data.size()), data);
  EXPECT_EQ(le(r, 12 + data.size(), 4), drope::mask_crc32c(drope::crc32c(data)));
}

TEST(TfEvents, NewFilePerWriterNeverAnExistingOne) {
  const std::string dir = tmp_dir("tfevents_new_file");
  // A foreign events file dated far in the future: ours must sort after it and leave it as it was.
  const fs::path foreign = fs::path(dir) / "events.out.tfevents.4000000000.elsewhere.1";
  std::ofstream(foreign) << "not ours";
  std::string first, second;
  {
    drope::EventFileWriter w(dir, 1);
    first = w.path();
    w.write_scalars(1, {{"loss", 2.5}, {"lr", 1e-3}});
  }
  {
    drope::EventFileWriter w(dir, 2);  // a restart within the same second still gets a later name
    second = w.path();
  }
  EXPECT_NE(first, second);
  EXPECT_LT(fs::path(foreign).filename().string(), fs::path(first).filename().string());
  EXPECT_LT(fs::path(first).filename().string(), fs::path(second).filename().string());
  EXPECT_EQ(slurp(foreign.string()), "not ours");
  // Every byte of the file is whole records: version, START, one summary.
  const std::string f = slurp(first);
  size_t at = 0;
  int records = 0;
  while (at < f.size()) {
    ASSERT_LE(at + 12, f.size());
    const uint64_t n = le(f, at, 8);
    ASSERT_LE(at + 12 + n + 4, f.size());
    EXPECT_EQ(le(f, at + 12 + n, 4), drope::mask_crc32c(drope::crc32c(f.substr(at + 12, n))));
    at += 12 + n + 4;
    ++records;
  }
  EXPECT_EQ(records, 3);
  EXPECT_NE(f.find("brain.Event:2"), std::string::npos);
}

TEST(TfEvents, RefusesAMissingDirectory) {
  const std::string dir = tmp_dir("tfevents_missing");
  expect_error([&] { drope::EventFileWriter w(dir + "/nope", 1); }, {"nope", "not a directory"});
  const std::string file = dir + "/file";
  std::ofstream(file) << "x";
  expect_error([&] { drope::EventFileWriter w(file, 1); }, {"file", "not a directory"});
}
