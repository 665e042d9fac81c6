// libattnkit_sentencepiece.so: the few SentencePiece calls Marian's tokenizer needs
// (src/text/marian_tokenizer.cpp), in a module of their own that attnkit loads with dlopen
// (RTLD_LOCAL | RTLD_DEEPBIND) when a Marian directory is read. Debian's libsentencepiece carries
// its own copy of protobuf-lite and exports it; linked into libattnkit, those symbols came before
// the system libprotobuf that LibTorch loads, which then crashed in its static initialisation.
// Loaded locally, the copy stays private to SentencePiece.
#include <sentencepiece_processor.h>

#include <string>
#include <vector>

extern "C" {

__attribute__((visibility("default"))) void* attnkit_sentencepiece_load(const std::string& path,
                                                                        std::string* error) {
  auto* processor = new sentencepiece::SentencePieceProcessor();
  const auto status = processor->Load(path);
  if (!status.ok()) {
    *error = status.ToString();
    delete processor;
    return nullptr;
  }
  return processor;
}

__attribute__((visibility("default"))) void attnkit_sentencepiece_free(void* processor) {
  delete static_cast<sentencepiece::SentencePieceProcessor*>(processor);
}

__attribute__((visibility("default"))) bool attnkit_sentencepiece_encode(void* processor,
                                                                         const std::string& text,
                                                                         std::vector<std::string>* pieces,
                                                                         std::string* error) {
  const auto status = static_cast<sentencepiece::SentencePieceProcessor*>(processor)->Encode(text, pieces);
  if (!status.ok()) *error = status.ToString();
  return status.ok();
}

__attribute__((visibility("default"))) bool attnkit_sentencepiece_decode(void* processor,
                                                                         const std::vector<std::string>& pieces,
                                                                         std::string* text,
                                                                         std::string* error) {
  const auto status = static_cast<sentencepiece::SentencePieceProcessor*>(processor)->Decode(pieces, text);
  if (!status.ok()) *error = status.ToString();
  return status.ok();
}

}  // extern "C"
