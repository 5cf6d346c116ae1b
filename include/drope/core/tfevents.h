// TensorBoard event files without TensorFlow: TFRecord framing and the few fields of the Event proto that
// scalar curves need, encoded by hand. Read back by TensorBoard (tested with its own event reader).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace drope {

// One scalar of an event: a tag and its value (stored as float32, Summary.Value.simple_value).
using TfScalar = std::pair<std::string, double>;

// One TFRecord: uint64 length, masked CRC-32C of those 8 bytes, the data, masked CRC-32C of the data
// (all little endian).
std::string tfrecord(std::string_view data);

// Serialized Event protos (tensorflow/core/util/event.proto).
std::string event_file_version(double wall_time);                      // file_version "brain.Event:2", step 0
std::string event_session_start(double wall_time, int64_t step);       // session_log {status: START}
std::string event_scalars(double wall_time, int64_t step, const std::vector<TfScalar>& scalars);  // summary

// Seconds since the Unix epoch, the Event.wall_time of "now".
double wall_time_now();

// An events file of its own in `dir`, named events.out.tfevents.<seconds>.<host>.<pid> so that it sorts
// after every events file already there (the seconds are bumped past the newest one's when a previous
// file started within the same second); an existing file is never opened (O_EXCL) nor changed.
// The file starts with the file_version event and a SessionLog START at `start_step`: TensorBoard then
// drops the events at steps >= start_step from earlier files of the directory (what a resumed or
// restarted run redoes). Each write goes to the kernel before it returns (no user-space buffering).
class EventFileWriter {
 public:
  EventFileWriter(const std::string& dir, int64_t start_step);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // One Event with a Summary of `scalars` at `step`, wall time now. Throws drope::Error naming the file
  // when the write fails.
  void write_scalars(int64_t step, const std::vector<TfScalar>& scalars);
  const std::string& path() const { return path_; }

 private:
  void write_record(std::string_view event);
  std::string path_;
  int fd_ = -1;
};

}  // namespace drope
