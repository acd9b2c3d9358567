// The file-system side of a checkpoint: names, durable renames, the `latest`
// pointer, listing and pruning.
//
// Commit protocol (rank 0, after every rank fsynced the finished NAME.tmp):
// rename NAME.tmp -> NAME, fsync the directory, write latest.tmp, fsync it,
// rename it over `latest`, fsync the directory. A crash at any point leaves
// `latest` naming a complete checkpoint.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dmuon::ckpt {

constexpr const char* kLatestName = "latest";

std::string checkpoint_name(int64_t user_step);  // "ckpt_<user_step>.h5"
// True for "ckpt_<integer>.h5" (not ".tmp"); the step goes to *step.
bool parse_checkpoint_name(const std::string& name, int64_t* step);
std::string join_path(const std::string& dir, const std::string& name);

bool path_exists(const std::string& path);
bool is_directory(const std::string& path);
// mkdir -p; throws DMUON_ERR_IO.
void make_directories(const std::string& dir);
// open + fsync + close; throws DMUON_ERR_IO with strerror.
void fsync_path(const std::string& path);
void rename_path(const std::string& from, const std::string& to);
void remove_file(const std::string& path) noexcept;

// Write `latest` atomically (tmp + fsync + rename + fsync directory).
void write_latest(const std::string& dir, const std::string& checkpoint);
// The name `latest` points at, "" when there is none or it is unreadable.
std::string read_latest(const std::string& dir);
// Checkpoints in dir as (user step, file name), newest (largest step) first.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& dir);
// Delete all but the newest `keep_last` checkpoints (0 keeps all) and the
// leftovers of crashed saves (ckpt_*.h5.tmp other than `keep_tmp`).
void prune(const std::string& dir, int keep_last);

}  // namespace dmuon::ckpt
