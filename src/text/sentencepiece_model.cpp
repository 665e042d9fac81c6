#include "attnkit/text/sentencepiece_model.h"

#include <fmt/format.h>

#include <cstring>

#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/text/unigram.h"

namespace attnkit::text {
namespace {

// One protobuf message: a cursor over its bytes.
class WireReader {
 public:
  WireReader(std::string_view bytes, const char* what) : bytes_(bytes), what_(what) {}

  bool done() const { return pos_ >= bytes_.size(); }

  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= bytes_.size()) fail("a varint runs past the end");
      const auto byte = static_cast<unsigned char>(bytes_[pos_++]);
      value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) return value;
    }
    fail("a varint is longer than 10 bytes");
  }

  // Next field: its number and wire type.
  std::pair<uint32_t, uint32_t> tag() {
    const uint64_t key = varint();
    return {static_cast<uint32_t>(key >> 3), static_cast<uint32_t>(key & 7)};
  }

  std::string_view bytes() {
    const uint64_t length = varint();
    if (length > bytes_.size() - pos_) fail(fmt::format("a field of {} bytes runs past the end ({} left)", length, bytes_.size() - pos_));
    std::string_view out = bytes_.substr(pos_, length);
    pos_ += length;
    return out;
  }

  float fixed32_float() {
    if (bytes_.size() - pos_ < 4) fail("a float runs past the end");
    const auto* u = reinterpret_cast<const unsigned char*>(bytes_.data() + pos_);
    const uint32_t bits = u[0] | (u[1] << 8) | (u[2] << 16) | (static_cast<uint32_t>(u[3]) << 24);
    pos_ += 4;
    float value;
    std::memcpy(&value, &bits, 4);
    return value;
  }

  void skip(uint32_t wire_type) {
    switch (wire_type) {
      case 0: varint(); return;
      case 1: advance(8); return;
      case 2: bytes(); return;
      case 5: advance(4); return;
      default: fail(fmt::format("unsupported wire type {}", wire_type));
    }
  }

  void expect(uint32_t wire_type, uint32_t expected, const char* field) {
    if (wire_type != expected) fail(fmt::format("field {} has wire type {}, expected {}", field, wire_type, expected));
  }

  [[noreturn]] void fail(const std::string& message) const { throw Error(fmt::format("{}: {}", what_, message)); }

 private:
  void advance(size_t n) {
    if (bytes_.size() - pos_ < n) fail("a fixed-size field runs past the end");
    pos_ += n;
  }
  std::string_view bytes_;
  const char* what_;
  size_t pos_ = 0;
};

enum PieceType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

struct SpmPiece {
  std::string piece;
  float score = 0.0f;
  int type = kNormal;
};

struct SpmModel {
  std::vector<SpmPiece> pieces;
  int model_type = 1;  // UNIGRAM
  bool byte_fallback = false;
  int64_t unk_id = 0;
  std::string charsmap;
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
};

SpmModel parse(std::string_view bytes) {
  SpmModel model;
  WireReader top(bytes, "ModelProto");
  while (!top.done()) {
    auto [field, wire] = top.tag();
    if (field == 1) {  // pieces
      top.expect(wire, 2, "pieces");
      WireReader reader(top.bytes(), "ModelProto.pieces");
      SpmPiece piece;
      while (!reader.done()) {
        auto [f, w] = reader.tag();
        if (f == 1) {
          reader.expect(w, 2, "piece");
          piece.piece = std::string(reader.bytes());
        } else if (f == 2) {
          reader.expect(w, 5, "score");
          piece.score = reader.fixed32_float();
        } else if (f == 3) {
          reader.expect(w, 0, "type");
          piece.type = static_cast<int>(reader.varint());
        } else {
          reader.skip(w);
        }
      }
      model.pieces.push_back(std::move(piece));
    } else if (field == 2) {  // trainer_spec
      top.expect(wire, 2, "trainer_spec");
      WireReader reader(top.bytes(), "ModelProto.trainer_spec");
      while (!reader.done()) {
        auto [f, w] = reader.tag();
        if (f == 3 && w == 0) {
          model.model_type = static_cast<int>(reader.varint());
        } else if (f == 35 && w == 0) {
          model.byte_fallback = reader.varint() != 0;
        } else if (f == 40 && w == 0) {
          model.unk_id = static_cast<int32_t>(static_cast<uint32_t>(reader.varint()));
        } else {
          reader.skip(w);
        }
      }
    } else if (field == 3) {  // normalizer_spec
      top.expect(wire, 2, "normalizer_spec");
      WireReader reader(top.bytes(), "ModelProto.normalizer_spec");
      while (!reader.done()) {
        auto [f, w] = reader.tag();
        if (f == 2 && w == 2) {
          model.charsmap = std::string(reader.bytes());
        } else if (f == 3 && w == 0) {
          model.add_dummy_prefix = reader.varint() != 0;
        } else if (f == 4 && w == 0) {
          model.remove_extra_whitespaces = reader.varint() != 0;
        } else if (f == 5 && w == 0) {
          model.escape_whitespaces = reader.varint() != 0;
        } else {
          reader.skip(w);
        }
      }
    } else {
      top.skip(wire);
    }
  }
  return model;
}

}  // namespace

Tokenizer tokenizer_from_sentencepiece(const std::string& bytes, const std::string& source) {
  try {
    SpmModel spm = parse(bytes);
    if (spm.model_type != 1) {
      static const char* kTypes[] = {"?", "UNIGRAM", "BPE", "WORD", "CHAR"};
      throw Error(fmt::format("model type {} is not supported (Unigram only)",
                              spm.model_type >= 0 && spm.model_type <= 4 ? kTypes[spm.model_type] : "?"));
    }
    if (spm.pieces.empty()) throw Error("the model has no pieces (not a SentencePiece model?)");
    if (spm.unk_id < 0 || static_cast<size_t>(spm.unk_id) >= spm.pieces.size()) {
      throw Error(fmt::format("unk_id {} is outside the {} pieces", spm.unk_id, spm.pieces.size()));
    }
    if (!spm.escape_whitespaces) throw Error("escape_whitespaces = false is not supported");
    TokenizerParts parts;
    std::vector<UnigramPiece> pieces;
    std::vector<AddedToken> added;
    bool has_cls = false;
    bool has_sep = false;
    for (size_t id = 0; id < spm.pieces.size(); ++id) {
      const SpmPiece& piece = spm.pieces[id];
      pieces.push_back({piece.piece, static_cast<double>(piece.score)});
      if (piece.type == kControl || piece.type == kUserDefined) {
        added.push_back({piece.piece, static_cast<uint32_t>(id), true, false, false, false, false});
        has_cls |= piece.piece == "[CLS]";
        has_sep |= piece.piece == "[SEP]";
      }
    }
    parts.model = std::make_shared<Unigram>(std::move(pieces), static_cast<uint32_t>(spm.unk_id), spm.byte_fallback);
    Normalizer normalizer({}, true);
    if (!spm.charsmap.empty()) {
      normalizer.steps.emplace_back(PrecompiledNormalizer{std::make_shared<PrecompiledCharsmap>(spm.charsmap)});
    }
    if (spm.remove_extra_whitespaces) {
      normalizer.steps.emplace_back(StripNormalizer{true, true});
      normalizer.steps.emplace_back(make_replace(" {2,}", true, " "));
    }
    if (!normalizer.steps.empty()) parts.normalizer = std::move(normalizer);
    MetaspacePreTokenizer metaspace;
    metaspace.add_prefix_space = spm.add_dummy_prefix;
    metaspace.prepend_scheme = spm.add_dummy_prefix ? "always" : "never";
    parts.pre_tokenizer = metaspace;
    parts.decoder = MetaspaceDecoder{metaspace.replacement, metaspace.add_prefix_space, metaspace.prepend_scheme};
    if (has_cls && has_sep) {
      const auto& vocabulary = parts.model->vocabulary();
      parts.post_processor =
          PostProcessor::bert("[CLS]", *vocabulary.find("[CLS]"), "[SEP]", *vocabulary.find("[SEP]"));
      parts.post_processor.kind = PostProcessor::Kind::kTemplate;
    }
    parts.added_tokens = AddedVocabulary(std::move(added));
    return Tokenizer(std::move(parts));
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", source, e.what()));
  }
}

Tokenizer read_sentencepiece_model(const std::string& path) { return tokenizer_from_sentencepiece(read_file(path), path); }

}  // namespace attnkit::text
