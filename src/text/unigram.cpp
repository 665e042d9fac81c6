#include "attnkit/text/unigram.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "attnkit/error.h"

namespace attnkit::text {
namespace {

constexpr double kUnknownPenalty = 10.0;

std::vector<std::string> piece_strings(const std::vector<UnigramPiece>& pieces) {
  std::vector<std::string> out;
  out.reserve(pieces.size());
  for (const auto& piece : pieces) out.push_back(piece.piece);
  return out;
}

size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

}  // namespace

Unigram::Unigram(std::vector<UnigramPiece> pieces, std::optional<uint32_t> unk_id, bool byte_fallback)
    : pieces_(std::move(pieces)),
      vocabulary_(Vocabulary::from_tokens(piece_strings(pieces_))),
      unk_id_(unk_id),
      byte_fallback_(byte_fallback) {
  if (unk_id_ && *unk_id_ >= pieces_.size()) {
    throw Error(fmt::format("Unigram model: unk_id {} is outside the vocabulary of {} pieces", *unk_id_, pieces_.size()));
  }
  double min_score = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < pieces_.size(); ++i) {
    if (!std::isfinite(pieces_[i].score)) {
      throw Error(fmt::format("Unigram model: piece {} ('{}') has a score that is not finite", i, pieces_[i].piece));
    }
    min_score = std::min(min_score, pieces_[i].score);
  }
  unk_score_ = (pieces_.empty() ? 0.0 : min_score) - kUnknownPenalty;

  // A byte trie over the pieces, built with ordered maps and then flattened.
  std::vector<std::map<unsigned char, uint32_t>> children(1);
  std::vector<int32_t> ends(1, -1);
  for (size_t id = 0; id < pieces_.size(); ++id) {
    const std::string& piece = pieces_[id].piece;
    if (piece.empty()) continue;
    uint32_t node = 0;
    for (unsigned char byte : piece) {
      auto it = children[node].find(byte);
      if (it == children[node].end()) {
        it = children[node].emplace(byte, static_cast<uint32_t>(children.size())).first;
        children.emplace_back();
        ends.push_back(-1);
      }
      node = it->second;
    }
    ends[node] = static_cast<int32_t>(id);
  }
  nodes_.resize(children.size());
  for (size_t n = 0; n < children.size(); ++n) {
    nodes_[n].piece = ends[n];
    nodes_[n].edges_begin = static_cast<uint32_t>(edge_bytes_.size());
    for (const auto& [byte, next] : children[n]) {
      edge_bytes_.push_back(byte);
      edge_nodes_.push_back(next);
    }
    nodes_[n].edges_end = static_cast<uint32_t>(edge_bytes_.size());
  }
  for (const auto& [byte, next] : children[0]) root_children_[byte] = next;
  for (int b = 0; b < 256; ++b) {
    auto id = vocabulary_.find(fmt::format("<0x{:02X}>", b));
    byte_ids_[b] = id ? static_cast<int32_t>(*id) : -1;
  }
}

uint32_t Unigram::child(uint32_t node, unsigned char byte) const {
  if (node == 0) return root_children_[byte];
  const Node& n = nodes_[node];
  for (uint32_t e = n.edges_begin; e < n.edges_end; ++e) {
    if (edge_bytes_[e] == byte) return edge_nodes_[e];
    if (edge_bytes_[e] > byte) break;
  }
  return 0;
}

void Unigram::tokenize(std::string_view word, std::vector<ModelToken>& out) const {
  const size_t n = word.size();
  if (n == 0) return;
  struct Best {
    double score = 0.0;
    int64_t start = -1;  // -1: not reached
    int64_t id = -1;     // -1: the unknown piece
  };
  thread_local std::vector<Best> best;
  best.assign(n + 1, Best{});
  best[0].start = 0;
  for (size_t start = 0; start < n;) {
    const double here = best[start].score;
    const size_t char_length = std::min(utf8_length(static_cast<unsigned char>(word[start])), n - start);
    bool has_single = false;
    uint32_t node = 0;
    for (size_t end = start; end < n;) {
      node = child(node, static_cast<unsigned char>(word[end]));
      if (node == 0) break;
      ++end;
      const int32_t id = nodes_[node].piece;
      if (id < 0) continue;
      Best& target = best[end];
      const double candidate = here + pieces_[static_cast<size_t>(id)].score;
      if (target.start < 0 || candidate > target.score) target = {candidate, static_cast<int64_t>(start), id};
      if (end - start == char_length) has_single = true;
    }
    if (!has_single) {
      if (!unk_id_ && !byte_fallback_) {
        throw Error(fmt::format("Unigram model: '{}' has no piece and the model has no unknown token",
                                std::string(word.substr(start, char_length))));
      }
      Best& target = best[start + char_length];
      const double candidate = here + unk_score_;
      if (target.start < 0 || candidate > target.score) {
        target = {candidate, static_cast<int64_t>(start), unk_id_ ? static_cast<int64_t>(*unk_id_) : -1};
      }
    }
    start += char_length;
  }
  // Backtrack; consecutive unknown pieces fuse into one.
  thread_local std::vector<std::pair<uint32_t, uint32_t>> spans;  // (begin, end), last first
  thread_local std::vector<int64_t> span_ids;
  spans.clear();
  span_ids.clear();
  const int64_t unk = unk_id_ ? static_cast<int64_t>(*unk_id_) : -1;
  for (size_t end = n; end > 0;) {
    const Best& node = best[end];
    const auto start = static_cast<size_t>(node.start);
    const bool is_unknown = node.id == unk;
    if (is_unknown && !span_ids.empty() && span_ids.back() == unk) {
      spans.back().first = static_cast<uint32_t>(start);
    } else {
      spans.emplace_back(static_cast<uint32_t>(start), static_cast<uint32_t>(end));
      span_ids.push_back(node.id);
    }
    end = start;
  }
  for (size_t k = spans.size(); k-- > 0;) {
    const auto [begin, end] = spans[k];
    int64_t id = span_ids[k];
    if (id == unk) {
      // The fused piece may still be a piece of its own (e.g. "<unk>" in the text).
      auto found = vocabulary_.find(word.substr(begin, end - begin));
      if (found) id = *found;
    }
    if (id == unk && byte_fallback_) {
      bool all = true;
      for (uint32_t i = begin; i < end && all; ++i) all = byte_ids_[static_cast<unsigned char>(word[i])] >= 0;
      if (all) {
        for (uint32_t i = begin; i < end; ++i) {
          out.push_back({static_cast<uint32_t>(byte_ids_[static_cast<unsigned char>(word[i])]), begin, end});
        }
        continue;
      }
      if (!unk_id_) throw Error("Unigram model: a piece has no byte tokens and the model has no unknown token");
    }
    out.push_back({static_cast<uint32_t>(id), begin, end});
  }
}

}  // namespace attnkit::text
