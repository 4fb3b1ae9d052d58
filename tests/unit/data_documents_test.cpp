// Reading documents: strict UTF-8 validation, the JSON Lines reader (its text field, nested too),
// compressed inputs read as streams, and the errors a user sees for bad input files (each names
// the file, and the line for .jsonl).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "data/documents.h"
#include "data/json_line.h"
#include "data/training_sample.h"
#include "data/utf8.h"
#include "model/core/error.h"
#include "tests/support/compression_support.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using testing::error_of;
using testing::gzip_member;
using testing::TempDir;
using testing::zstd_frame;
namespace fs = std::filesystem;

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(Utf8, AcceptsValidText) {
  EXPECT_FALSE(find_invalid_utf8("plain ascii\n"));
  EXPECT_FALSE(find_invalid_utf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"));  // é € 😀
  EXPECT_FALSE(find_invalid_utf8("\xF4\x8F\xBF\xBF"));                           // U+10FFFF
  EXPECT_FALSE(find_invalid_utf8(std::string("a\0b", 3)));
}

TEST(Utf8, RejectsMalformedSequencesAtTheirOffset) {
  EXPECT_EQ(find_invalid_utf8("ab\x80"), 2u);            // stray continuation byte
  EXPECT_EQ(find_invalid_utf8("a\xC0\xAF"), 1u);         // overlong '/'
  EXPECT_EQ(find_invalid_utf8("\xE0\x80\xAF"), 0u);      // overlong 3-byte form
  EXPECT_EQ(find_invalid_utf8("xy\xED\xA0\x80"), 2u);    // surrogate U+D800
  EXPECT_EQ(find_invalid_utf8("\xF4\x90\x80\x80"), 0u);  // above U+10FFFF
  EXPECT_EQ(find_invalid_utf8("ok\xE2\x82"), 2u);        // truncated at the end
  EXPECT_EQ(find_invalid_utf8("\xE2\x28\xA1"), 0u);      // bad continuation
  EXPECT_EQ(find_invalid_utf8("\xFF"), 0u);
}

TEST(JsonLine, ExtractsTextWithEveryEscape) {
  EXPECT_EQ(json_line_text(R"({"text": "hello"})"), "hello");
  EXPECT_EQ(json_line_text(R"({"text":"a\"b\\c\/d\b\f\n\r\t"})"), "a\"b\\c/d\b\f\n\r\t");
  EXPECT_EQ(json_line_text(R"({"text":"\u00e9\u20AC"})"), "\xC3\xA9\xE2\x82\xAC");
  EXPECT_EQ(json_line_text(R"({"text":"\ud83d\ude00"})"), "\xF0\x9F\x98\x80");  // surrogate pair
  EXPECT_EQ(json_line_text(R"({"text":"\u0000"})"), std::string("\0", 1));
  EXPECT_EQ(json_line_text("{\"text\":\"caf\xC3\xA9\"}"), "caf\xC3\xA9");  // raw UTF-8
}

TEST(JsonLine, SkipsOtherMembers) {
  EXPECT_EQ(json_line_text(R"( { "id": -12.5e+3, "ok": true, "no": false, "none": null,
      "tags": ["a", {"nested": [1, 2, {"text": "inner"}]}], "meta": {}, "text": "doc" } )"),
            "doc");
  EXPECT_EQ(json_line_text(R"({"text": "first", "text": "last"})"), "last");
}

TEST(JsonLine, RejectsInvalidJsonWithColumn) {
  EXPECT_EQ(error_of([] { json_line_text(R"(["text"])"); }), "column 1: expected a JSON object");
  EXPECT_EQ(error_of([] { json_line_text(R"({"id": 1})"); }),
            "column 1: object has no string field \"text\"");
  EXPECT_EQ(error_of([] { json_line_text(R"({"text": 5})"); }),
            "column 10: field \"text\" is not a string");
  EXPECT_EQ(error_of([] { json_line_text(R"({"text": "a"} x)"); }),
            "column 15: unexpected data after the JSON object");
  EXPECT_NE(error_of([] { json_line_text(R"({"text": "a\q"})"); }).find("invalid escape"),
            std::string::npos);
  EXPECT_NE(error_of([] { json_line_text(R"({"text": "\ud800"})"); }).find("lone high surrogate"),
            std::string::npos);
  EXPECT_NE(error_of([] { json_line_text(R"({"text": "\udc00"})"); }).find("lone low surrogate"),
            std::string::npos);
  EXPECT_NE(error_of([] { json_line_text(R"({"text": "abc)"); }).find("unterminated string"),
            std::string::npos);
  EXPECT_NE(error_of([] { json_line_text(R"({"n": 01, "text": ""})"); }), "");
  EXPECT_NE(error_of([] { json_line_text(R"({"n": 1., "text": ""})"); }), "");
  EXPECT_NE(error_of([] { json_line_text(R"({"n": tru, "text": ""})"); }), "");
  EXPECT_NE(error_of([] { json_line_text("{\"text\": \"a\tb\"}"); }).find("control character"),
            std::string::npos);
  EXPECT_NE(error_of([] { json_line_text(std::string(1000, '[')); }), "");
}

TEST(JsonLine, TheTextFieldMayBeAnyMemberOrANestedOne) {
  const std::string line =
      R"({"id": 7, "content": "top", "meta": {"body": {"text": "deep"}, "n": 3}, "a.b": "dotted"})";
  EXPECT_EQ(json_line_text(line, "content"), "top");
  EXPECT_EQ(json_line_text(line, "meta.body.text"), "deep");
  EXPECT_EQ(json_line_text(line, "a.b"), "dotted");  // a member named with a dot comes first
  EXPECT_EQ(error_of([&] { json_line_text(line, "body"); }),
            "column 1: object has no string field \"body\"");
  EXPECT_EQ(error_of([&] { json_line_text(line, "meta.body.title"); }),
            "column 1: object has no string field \"meta.body.title\"");
  EXPECT_EQ(error_of([&] { json_line_text(line, "meta.body"); }),
            "column 46: field \"meta.body\" is not a string");
  EXPECT_EQ(error_of([&] { json_line_text(line, "meta.n.text"); }),
            "column 69: field \"meta.n\" is a number, not an object holding \"meta.n.text\"");
  EXPECT_EQ(error_of([&] { json_line_text(line, "id.x"); }),
            "column 8: field \"id\" is a number, not an object holding \"id.x\"");
}

TEST(Documents, PlainTextFileIsOneDocument) {
  TempDir dir("documents_plain");
  write_file(dir / "a.txt", "line one\nline two\n");
  const std::vector<std::string> documents = read_documents(dir / "a.txt");
  ASSERT_EQ(documents.size(), 1u);
  EXPECT_EQ(documents[0], "line one\nline two\n");
}

TEST(Documents, PlainTextSplitsIntoParagraphsOrLines) {
  TempDir dir("documents_split");
  write_file(dir / "b.txt", "\n  \nfirst line\nsecond line\n\n \t\r\n\nnext one\r\nlast, no end");
  EXPECT_EQ(read_documents(dir / "b.txt", TextSplit::paragraphs),
            (std::vector<std::string>{"first line\nsecond line\n", "next one\r\nlast, no end"}));
  EXPECT_EQ(read_documents(dir / "b.txt", TextSplit::lines),
            (std::vector<std::string>{"first line", "second line", "next one", "last, no end"}));
  EXPECT_EQ(read_documents(dir / "b.txt", TextSplit::file).size(), 1u);
  write_file(dir / "blank.txt", "\n \n\t\n");
  EXPECT_NE(error_of([&] {
              read_documents(dir / "blank.txt", TextSplit::lines);
            }).find("holds no documents (all lines are blank)"),
            std::string::npos);
  write_file(dir / "c.jsonl", "{\"text\": \"a\\n\\nb\"}\n");  // .jsonl: never cut further
  EXPECT_EQ(read_documents(dir / "c.jsonl", TextSplit::paragraphs).size(), 1u);
  EXPECT_EQ(parse_text_split("paragraphs"), TextSplit::paragraphs);
  EXPECT_NE(error_of([] { parse_text_split("words"); }).find("file, paragraphs or lines"),
            std::string::npos);
}

TEST(Documents, JsonlHasOneDocumentPerLine) {
  TempDir dir("documents_jsonl");
  write_file(dir / "c.jsonl",
             "\xEF\xBB\xBF{\"text\": \"first\\nline\"}\n\n  \n{\"text\": \"\", \"id\": 2}\r\n"
             "{\"text\": \"third\"}");
  const std::vector<std::string> documents = read_documents(dir / "c.jsonl");
  ASSERT_EQ(documents.size(), 3u);
  EXPECT_EQ(documents[0], "first\nline");
  EXPECT_EQ(documents[1], "");
  EXPECT_EQ(documents[2], "third");
}

TEST(Documents, ErrorsNameTheFileAndPosition) {
  TempDir dir("documents_errors");
  const std::string missing = dir / "missing.txt";
  EXPECT_NE(error_of([&] { read_documents(missing); }).find(missing), std::string::npos);

  write_file(dir / "empty.txt", "");
  EXPECT_EQ(error_of([&] { read_documents(dir / "empty.txt"); }),
            "input file '" + (dir / "empty.txt") + "' is empty");

  write_file(dir / "bad.txt", "good line\nbad \xFF byte");
  EXPECT_EQ(error_of([&] { read_documents(dir / "bad.txt"); }),
            "input file '" + (dir / "bad.txt") +
                "' is not valid UTF-8: invalid byte 0xFF at byte offset 14 (line 2)");

  write_file(dir / "blank.jsonl", "\n  \n");
  EXPECT_EQ(error_of([&] { read_documents(dir / "blank.jsonl"); }),
            "input file '" + (dir / "blank.jsonl") + "' holds no documents (all lines are blank)");

  write_file(dir / "bad.jsonl", "{\"text\": \"ok\"}\n{\"title\": \"no text\"}\n");
  EXPECT_EQ(error_of([&] { read_documents(dir / "bad.jsonl"); }),
            (dir / "bad.jsonl") + ":2: column 1: object has no string field \"text\"");

  EXPECT_NE(error_of([&] { read_documents(dir.str()); }).find("is a directory"), std::string::npos);
}

TEST(Documents, TheTextFieldNamesTheMemberAndErrorsNameIt) {
  TempDir dir("documents_text_field");
  write_file(
      dir / "f.jsonl",
      "{\"meta\": {\"content\": \"one\"}}\n{\"meta\": {\"content\": \"two\"}, \"text\": \"x\"}\n");
  EXPECT_EQ(read_documents(dir / "f.jsonl", TextSplit::file, "meta.content"),
            (std::vector<std::string>{"one", "two"}));
  EXPECT_EQ(error_of([&] { read_documents(dir / "f.jsonl"); }),
            (dir / "f.jsonl") + ":1: column 1: object has no string field \"text\"");
  write_file(dir / "g.jsonl", "{\"body\": \"a\"}\n\n{\"body\": [\"b\"]}\n");
  EXPECT_EQ(error_of([&] { read_documents(dir / "g.jsonl", TextSplit::file, "body"); }),
            (dir / "g.jsonl") + ":3: column 10: field \"body\" is not a string");
}

// The same documents, whatever the compression; errors keep their file, line and offset (in the
// decompressed text).
TEST(Documents, CompressedInputsReadLikeTheirText) {
  TempDir dir("documents_compressed");
  std::string jsonl = "\xEF\xBB\xBF";
  std::vector<std::string> expected;
  for (int i = 0; i < 3000; ++i) {
    expected.push_back("document " + std::to_string(i) + std::string(i % 97, 'w'));
    jsonl += "{\"text\": \"" + expected.back() + "\"}\n" + (i % 10 == 0 ? "\n" : "");
  }
  write_file(dir / "c.jsonl", jsonl);
  write_file(dir / "c.jsonl.gz",
             gzip_member(jsonl.substr(0, 5000)) + gzip_member(jsonl.substr(5000)));
  write_file(dir / "c.jsonl.zst", zstd_frame(jsonl));
  EXPECT_EQ(read_documents(dir / "c.jsonl"), expected);
  EXPECT_EQ(read_documents(dir / "c.jsonl.gz"), expected);
  EXPECT_EQ(read_documents(dir / "c.jsonl.zst"), expected);

  const std::string text = "para one\nline two\n\npara two\n";
  write_file(dir / "t.txt.gz", gzip_member(text));
  write_file(dir / "t.zst", zstd_frame(text));
  EXPECT_EQ(read_documents(dir / "t.txt.gz"), (std::vector<std::string>{text}));
  EXPECT_EQ(read_documents(dir / "t.zst", TextSplit::paragraphs),
            (std::vector<std::string>{"para one\nline two\n", "para two\n"}));
  EXPECT_EQ(read_documents(dir / "t.zst", TextSplit::lines),
            (std::vector<std::string>{"para one", "line two", "para two"}));

  write_file(dir / "bad.txt.zst", zstd_frame("good line\nbad \xFF byte"));
  EXPECT_EQ(error_of([&] { read_documents(dir / "bad.txt.zst"); }),
            "input file '" + (dir / "bad.txt.zst") +
                "' is not valid UTF-8: invalid byte 0xFF at byte offset 14 (line 2)");
  write_file(dir / "bad.jsonl.gz", gzip_member("{\"text\": \"ok\"}\n{\"title\": \"no text\"}\n"));
  EXPECT_EQ(error_of([&] { read_documents(dir / "bad.jsonl.gz"); }),
            (dir / "bad.jsonl.gz") + ":2: column 1: object has no string field \"text\"");
  write_file(dir / "empty.jsonl.zst", zstd_frame(""));
  EXPECT_EQ(error_of([&] { read_documents(dir / "empty.jsonl.zst"); }),
            "input file '" + (dir / "empty.jsonl.zst") + "' is empty");
  write_file(dir / "blank.jsonl.gz", gzip_member("\n\r\n"));
  EXPECT_EQ(
      error_of([&] { read_documents(dir / "blank.jsonl.gz"); }),
      "input file '" + (dir / "blank.jsonl.gz") + "' holds no documents (all lines are blank)");
}

// A reader holds one document at a time: a long one is read whole, in order, among short ones.
TEST(Documents, DocumentsLongerThanTheReadBufferStayWhole) {
  TempDir dir("documents_long");
  const std::string long_text(5 << 20, 'y');
  write_file(dir / "l.jsonl.zst", zstd_frame("{\"text\": \"a\"}\n{\"text\": \"" + long_text +
                                             "\"}\n{\"text\": \"b\"}\n"));
  DocumentReader reader(dir / "l.jsonl.zst");
  std::string document;
  ASSERT_TRUE(reader.next(document));
  EXPECT_EQ(document, "a");
  ASSERT_TRUE(reader.next(document));
  EXPECT_EQ(document, long_text);
  ASSERT_TRUE(reader.next(document));
  EXPECT_EQ(document, "b");
  EXPECT_FALSE(reader.next(document));
  EXPECT_FALSE(reader.next(document));
}

TEST(Documents, ACorpusReadsItsFilesAsOneStream) {
  TempDir dir("documents_corpus");
  write_file(dir / "a.txt", "whole file\n");
  write_file(dir / "b.jsonl.gz", gzip_member("{\"text\": \"b1\"}\n{\"text\": \"b2\"}\n"));
  write_file(dir / "c.txt.zst", zstd_frame("c1\n\nc2"));
  CorpusReader corpus({dir / "a.txt", dir / "b.jsonl.gz", dir / "c.txt.zst"}, TextSplit::paragraphs,
                      "text");
  std::vector<std::string> documents;
  std::string document;
  while (corpus.next(document)) documents.push_back(document);
  EXPECT_EQ(documents, (std::vector<std::string>{"whole file\n", "b1", "b2", "c1\n", "c2"}));
  std::uint64_t bytes = 0;
  for (const char* name : {"a.txt", "b.jsonl.gz", "c.txt.zst"}) bytes += fs::file_size(dir / name);
  EXPECT_EQ(corpus.file_bytes_read(), bytes);
}

// The tokenizer's training text: every line while it fits, a deterministic sample beyond.
TEST(TrainingSample, KeepsEveryLineUnderItsBudget) {
  TrainingSample sample(1000);
  sample.add_document("first line\n\r\n\nsecond\r\n");
  sample.add_document("");
  sample.add_document("third");
  EXPECT_FALSE(sample.sampled());
  EXPECT_EQ(sample.text(), "first linesecond\rthird");
  EXPECT_EQ(sample.lengths(), (std::vector<std::uint16_t>{10, 7, 5}));
  // A line longer than SentencePiece's limit is cut at a character boundary.
  TrainingSample cut(1 << 20);
  const std::string two_byte = "\xC3\xA9";
  std::string line(kMaxTrainingSentenceBytes - 1, 'a');
  line += two_byte + "tail";
  cut.add_document(line);
  EXPECT_EQ(cut.lengths(), (std::vector<std::uint16_t>{kMaxTrainingSentenceBytes - 1, 2 + 4}));
}

TEST(TrainingSample, SamplesDeterministicallyWithinItsBudget) {
  std::vector<std::string> lines;
  for (int i = 0; i < 20000; ++i) lines.push_back("line " + std::to_string(i) + " of the corpus");
  const auto sample_of = [&](std::size_t lines_per_document) {
    TrainingSample sample(100000);
    std::string document;
    for (std::size_t i = 0; i < lines.size(); ++i) {
      document += lines[i] + "\n";
      if ((i + 1) % lines_per_document == 0) {
        sample.add_document(document);
        document.clear();
      }
    }
    sample.add_document(document);
    return sample;
  };
  const TrainingSample sample = sample_of(1);
  EXPECT_TRUE(sample.sampled());
  EXPECT_EQ(sample.sentences_seen(), lines.size());
  const std::uint64_t held = sample.text_bytes() + 6 * sample.sentences();
  EXPECT_LE(held, 100000u);
  EXPECT_GE(held, 70000u);  // at least 3/4 of the budget, less the last few lines dropped
  EXPECT_LT(sample.sentences(), lines.size());
  // The same lines however documents cut them, in corpus order.
  const TrainingSample regrouped = sample_of(7);
  EXPECT_EQ(regrouped.text(), sample.text());
  EXPECT_EQ(regrouped.lengths(), sample.lengths());
  std::size_t next = 0, offset = 0;
  for (const std::uint16_t length : sample.lengths()) {
    const std::string kept = sample.text().substr(offset, length);
    offset += length;
    while (next < lines.size() && lines[next] != kept) ++next;
    ASSERT_LT(next, lines.size()) << "'" << kept << "' out of order or not a corpus line";
  }
}

}  // namespace
}  // namespace strata
