// drope-data's flag parsing: one registration function per command family, each filling the options of
// drope/text/ and calling the library. Torch-free: it links no drope_app.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace drope::datacli {

// Runs `body`; an error prints one "error: ..." line and exits 1 (drope::app::run without LibTorch). The
// logger clears a progress line that the error interrupted.
int run(const std::function<int()>& body);

// Command families; each callback stores its exit status in `rc`.
void add_prepare_command(CLI::App& cli, int& rc);    // prepare: documents → tokenizer → token shards
void add_tokenize_commands(CLI::App& cli, int& rc);  // encode, decode: a tokenizer on JSON ids and texts

}  // namespace drope::datacli
