// Reading documents: strict UTF-8 validation, the JSON Lines reader and the errors a user sees
// for bad input files (each names the file, and the line for .jsonl).
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "data/documents.h"
#include "data/json_line.h"
#include "data/utf8.h"
#include "model/core/error.h"
#include "tests/unit/test_support.h"

namespace strata {
namespace {

using testing::error_of;
using testing::TempDir;

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

}  // namespace
}  // namespace strata
