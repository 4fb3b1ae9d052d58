// The checkpoint seal (train/checkpoint/checkpoint_seal.h): damage anywhere in the file, HDF5's own
// structures included, is an error naming the file and the damaged bytes before HDF5 reads them;
// locate_checkpoint_damage then names the tensor when the damage is in one. New files are of
// format 4 (XXH3-64 byte checksums), or 5 with optional buffers; files of format 3 are still
// checked and read (train/checkpoint/checkpoint_format.h).
#include <gtest/gtest.h>
#include <xxhash.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "data/hdf5_handle.h"
#include "plan/config.h"
#include "tests/support/checkpoint_support.h"
#include "tests/support/test_support.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checkpoint_seal.h"
#include "train/checkpoint/checkpoint_verify.h"

namespace strata {
namespace {

const GptShape kShape{1, 2, 8, 4, 16};

std::string write_small_checkpoint(const std::string& dir) {
  std::vector<float> params(ParameterLayout::for_gpt(kShape).total());
  for (std::size_t i = 0; i < params.size(); ++i) params[i] = 0.25f * float(i % 11);
  return testing::write_strata_checkpoint(dir, kShape, params);
}

void flip_byte(const std::string& path, std::uint64_t offset) {
  std::fstream file(path, std::ios::binary | std::ios::in | std::ios::out);
  file.seekg(static_cast<std::streamoff>(offset));
  char byte = 0;
  file.read(&byte, 1);
  byte = static_cast<char>(byte ^ 0x10);
  file.seekp(static_cast<std::streamoff>(offset));
  file.write(&byte, 1);
}

std::string error_of(const std::string& path) {
  try {
    verify_checkpoint(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The file offset of the first element of dataset `name` (contiguous, so its data lie together;
// HDF5 counts it from the start of the file, user block included).
std::uint64_t data_offset(const std::string& path, const std::string& name) {
  H5File file = H5File::open_read(path);
  H5Id dataset = open_dataset(file.id(), name);
  const haddr_t address = H5Dget_offset(dataset.get());
  EXPECT_NE(address, HADDR_UNDEF);
  return address;
}

TEST(CheckpointSeal, AnIntactFileVerifies) {
  testing::TempDir dir("seal_intact");
  const std::string path = write_small_checkpoint(dir.str());
  EXPECT_EQ(error_of(path), "");
  EXPECT_EQ(verify_checkpoint(path).step, 7);
}

TEST(CheckpointSeal, DamageInHdf5StructuresIsCaughtBeforeHdf5ReadsThem) {
  testing::TempDir dir("seal_structures");
  const std::string path = write_small_checkpoint(dir.str());
  flip_byte(path, kSealBytes + 40);  // inside HDF5's superblock, which follows the user block
  const std::string error = error_of(path);
  EXPECT_NE(error.find("checkpoint '" + path + "' is damaged: bytes 4096 to "), std::string::npos)
      << error;
  EXPECT_NE(error.find("do not match its seal"), std::string::npos) << error;
  // No tensor is to blame; the search for one runs in a child process, which HDF5 may crash.
  const std::string where = locate_checkpoint_damage(path);
  EXPECT_TRUE(where.starts_with("the damage is in HDF5's own structures")) << where;
}

TEST(CheckpointSeal, DamageInATensorIsLocatedToTheTensor) {
  testing::TempDir dir("seal_tensor");
  const std::string path = write_small_checkpoint(dir.str());
  flip_byte(path, data_offset(path, "/model/h.0.mlp.fc.weight") + 2);
  EXPECT_NE(error_of(path).find("do not match its seal"), std::string::npos);
  const std::string where = locate_checkpoint_damage(path);
  EXPECT_NE(where.find("tensor '/model/h.0.mlp.fc.weight' fails its checksum"), std::string::npos)
      << where;
}

TEST(CheckpointSeal, ADamagedSealOrNoSealIsRefused) {
  testing::TempDir dir("seal_header");
  const std::string path = write_small_checkpoint(dir.str());
  flip_byte(path, 40);  // a length field of the seal itself
  EXPECT_NE(error_of(path).find("its seal (the first 4096 bytes) fails its own checksum"),
            std::string::npos)
      << error_of(path);

  const std::string plain = dir / "plain.h5";  // an HDF5 file with no user block
  H5File::create(plain).close();
  EXPECT_NE(error_of(plain).find("does not begin with a checkpoint seal"), std::string::npos)
      << error_of(plain);
}

TEST(CheckpointSeal, ATruncatedOrExtendedFileIsNamed) {
  testing::TempDir dir("seal_length");
  const std::string path = write_small_checkpoint(dir.str());
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size - 100);
  EXPECT_NE(error_of(path).find("is truncated: it holds " + std::to_string(size - 100) +
                                " bytes, its seal records " + std::to_string(size)),
            std::string::npos)
      << error_of(path);
  std::filesystem::resize_file(path, size + 100);
  EXPECT_NE(error_of(path).find("is damaged: it holds"), std::string::npos) << error_of(path);
  // Cut inside its seal, or to nothing: once called "not a Strata checkpoint".
  std::filesystem::resize_file(path, 1000);
  EXPECT_NE(error_of(path).find("is truncated: it holds 1000 bytes, less than its 4096-byte seal"),
            std::string::npos)
      << error_of(path);
  std::filesystem::resize_file(path, 0);
  EXPECT_NE(error_of(path).find("is truncated: it is empty"), std::string::npos) << error_of(path);
}

TEST(CheckpointSeal, ARewrittenFileIsCheckedAgain) {
  // A process remembers the file versions it found intact; a new version is checked anew.
  testing::TempDir dir("seal_again");
  const std::string path = write_small_checkpoint(dir.str());
  EXPECT_EQ(error_of(path), "");
  flip_byte(path, kSealBytes + 200);
  EXPECT_NE(error_of(path).find("do not match its seal"), std::string::npos);
}

TEST(CheckpointSeal, ByteChecksumsAreXxh3InFormat4AndTheOldMixInFormat3) {
  const std::string text = "strata checkpoint bytes";
  EXPECT_EQ(checksum_bytes(text.data(), text.size()), XXH3_64bits(text.data(), text.size()));
  EXPECT_NE(checksum_bytes(text.data(), text.size(), CheckpointFormat::v3),
            checksum_bytes(text.data(), text.size()));
  EXPECT_EQ(checksum_bytes(nullptr, 0), XXH3_64bits(nullptr, 0));
}

TEST(CheckpointSeal, NewFilesAreFormat4AndFormat3FilesAreStillChecked) {
  testing::TempDir dir("seal_formats");
  std::vector<float> params(ParameterLayout::for_gpt(kShape).total(), 0.5f);
  const std::string path =
      testing::write_strata_checkpoint(dir.str(), kShape, params, "tokenizer model bytes");
  EXPECT_EQ(verify_checkpoint(path).format, CheckpointFormat::v4);
  {
    H5File file = H5File::open_read(path);
    EXPECT_EQ(read_attribute_string(file.id(), "format"), "strata-checkpoint-4");
  }
  testing::rewrite_as_format_3(path);
  EXPECT_EQ(error_of(path), "");
  EXPECT_EQ(verify_checkpoint(path).format, CheckpointFormat::v3);
  EXPECT_EQ(read_checkpoint(path, ParameterLayout::for_gpt(kShape), false).tokenizer_model,
            "tokenizer model bytes");
  flip_byte(path, data_offset(path, "/model/wpe") + 1);
  EXPECT_NE(error_of(path).find("do not match its seal"), std::string::npos) << error_of(path);
}

// Format 5 is format 4 with optional per-tensor buffers (the FP8 delayed recipe's histories):
// written only when a checkpoint holds one, so a version before it refuses such a file. A file of
// format 4 that holds them (written before format 5) is read with them; one that lacks them reads
// zeros.
TEST(CheckpointSeal, OptionalBuffersMakeFormat5AndAreReadFromFormat4Too) {
  testing::TempDir dir("seal_format5");
  const ParameterLayout layout = ParameterLayout::for_gpt(kShape);
  const std::string tensor = "h.0.attn.qkv.weight";
  auto buffers_of = [&](std::vector<float> history) {
    std::vector<StateBuffer> buffers{
        {"model", {0, layout.total()}, std::vector<float>(layout.total(), 0.5f)}};
    StateBuffer fp8{"fp8/amax_history", {}, std::move(history), true};
    fp8.statistics.push_back({tensor, 3});
    fp8.optional = true;
    buffers.push_back(std::move(fp8));
    return buffers;
  };
  const CheckpointWriter writer{&layout, kShape, {{0, layout.total()}}, nullptr, {}};
  const CheckpointMeta meta{"config: test", CheckpointState{3, 96, 9, 1.0, 3, -1}, "", {}};
  const std::string path = write_checkpoint(dir.str(), writer, meta, buffers_of({1, 2, 4}));
  EXPECT_EQ(verify_checkpoint(path).format, CheckpointFormat::v5);
  std::vector<StateBuffer> read = buffers_of({});
  read_checkpoint(path, layout, read);
  EXPECT_EQ(read[1].values, (std::vector<float>{1, 2, 4}));

  {  // the same file as format 4 wrote it before format 5: its histories are read
    H5File file = H5File::open_write(path);
    write_attribute_string(file.id(), "format", "strata-checkpoint-4");
    file.close();
  }
  seal_checkpoint_file(path);
  EXPECT_EQ(error_of(path), "");
  read = buffers_of({});
  read_checkpoint(path, layout, read);
  EXPECT_EQ(read[1].values, (std::vector<float>{1, 2, 4}));
  // Without an optional buffer a checkpoint stays format 4, and a run that keeps one resumes from
  // it with zeros (empty histories).
  std::vector<StateBuffer> plain = buffers_of({});
  plain.pop_back();
  const std::string plain_path = write_checkpoint(dir / "plain", writer, meta, plain);
  EXPECT_EQ(verify_checkpoint(plain_path).format, CheckpointFormat::v4);
  read = buffers_of({});
  read_checkpoint(plain_path, layout, read);
  EXPECT_EQ(read[1].values, (std::vector<float>{0, 0, 0}));
}

TEST(CheckpointSeal, AFormat3FileOfAnEarlierVersionIsRead) {
  // The fuzz corpus's valid checkpoint was written by the version before format 4.
  testing::TempDir dir("seal_earlier");
  const std::string path = dir / "step_00000003.h5";
  std::filesystem::copy_file(
      testing::source_dir() + "/tests/fuzz/corpus/checkpoint/seed-valid-checkpoint", path);
  EXPECT_EQ(error_of(path), "");
  EXPECT_EQ(verify_checkpoint(path).format, CheckpointFormat::v3);
}

TEST(CheckpointSeal, AnUnknownFormatIsRefusedNamingTheAcceptedOnes) {
  testing::TempDir dir("seal_unknown");
  const std::string path = write_small_checkpoint(dir.str());
  {
    H5File file = H5File::open_write(path);
    write_attribute_string(file.id(), "format", "strata-checkpoint-2");
    file.close();
  }
  seal_checkpoint_file(path);
  EXPECT_EQ(error_of(path), "'" + path +
                                "' is not a Strata checkpoint of format strata-checkpoint-5, "
                                "strata-checkpoint-4 or strata-checkpoint-3 (missing or other "
                                "'format' attribute)");
  const std::string plain = dir / "plain.h5";
  H5File::create(plain).close();
  EXPECT_EQ(error_of(plain), "'" + plain +
                                 "' is not a Strata checkpoint of format strata-checkpoint-5, "
                                 "strata-checkpoint-4 or strata-checkpoint-3 (it does not begin "
                                 "with a checkpoint seal)");
}

}  // namespace
}  // namespace strata
