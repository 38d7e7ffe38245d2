// `1bit tokenize --tokenizer tokenizer.json`: text -> ids, or ids -> text.
#include <fmt/format.h>

#include "cli/commands.h"
#include "base/error.h"
#include "base/text_file.h"
#include "models/tokenizer/token_ids.h"
#include "models/tokenizer/tokenizer.h"

namespace onebit::cli {

void add_tokenize_command(CLI::App& app, Action& action) {
  auto* cmd =
      app.add_subcommand("tokenize",
                         "Encode text to token ids (a JSON array) or decode ids to text with a tokenizer.json\n\n"
                         "  echo 'Hello world' | 1bit tokenize --tokenizer tokenizer.json\n"
                         "  1bit tokenize --tokenizer tokenizer.json --decode --text '[9707, 1879]'");
  struct Args {
    std::string tokenizer;
    std::string text;
    bool decode = false;
    bool no_special = false;
    bool skip_special = false;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("--tokenizer", args->tokenizer, "tokenizer.json (Hugging Face format)")->required();
  cmd->add_option("--text", args->text, "Input instead of stdin: text, or ids with --decode");
  cmd->add_flag("--decode", args->decode, "Read ids (JSON array or whitespace-separated) and print the text");
  cmd->add_flag("--no-special", args->no_special, "Encode special tokens' text literally instead of as their ids");
  cmd->add_flag("--skip-special", args->skip_special, "With --decode, leave special tokens out of the text");
  cmd->callback([args, &action, cmd] {
    const bool from_stdin = cmd->count("--text") == 0;
    action = [args, from_stdin] {
      std::string input = args->text;
      // Bytes go through untouched: the tokenizer itself repairs invalid UTF-8.
      if (from_stdin) input = read_text_file("-", kMaxTextInputBytes, "tokenize");
      const Tokenizer tokenizer = Tokenizer::load(args->tokenizer);
      if (args->decode) {
        fmt::print("{}", tokenizer.decode(parse_token_ids(input, "--decode"), args->skip_special));
        return 0;
      }
      fmt::print("[{}]\n", fmt::join(tokenizer.encode(input, !args->no_special), ", "));
      return 0;
    };
  });
}

}  // namespace onebit::cli
