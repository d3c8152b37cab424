// The Delta transaction log's actions (PROTOCOL.md "Actions") and their JSON codec: one action
// per line of a `_delta_log/%020d.json` commit, one object per action. Unknown fields and
// unknown action kinds are tolerated (skipped), as the protocol asks of readers; cdc actions are
// parsed and ignored; domainMetadata is parsed. Pure functions, no I/O; thread-compatible.
#pragma once

#include <boost/json.hpp>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/common/status.h"

namespace trainyard::tables {

struct ProtocolAction {
  int min_reader_version = 1;
  int min_writer_version = 2;
  std::optional<std::vector<std::string>> reader_features;  // reader version 3
  std::optional<std::vector<std::string>> writer_features;  // writer version 7
};

struct MetadataAction {
  std::string id;
  std::string name;
  std::string description;
  std::string format_provider = "parquet";
  std::map<std::string, std::string> format_options;
  std::string schema_string;
  std::vector<std::string> partition_columns;
  std::map<std::string, std::string> configuration;
  std::optional<int64_t> created_time;
};

struct AddAction {
  std::string path;  // URI-encoded, relative to the table root
  std::map<std::string, std::optional<std::string>> partition_values;
  int64_t size = 0;
  int64_t modification_time = 0;
  bool data_change = true;
  std::optional<std::string> stats;  // JSON text
  std::map<std::string, std::string> tags;
  bool has_deletion_vector = false;
};

struct RemoveAction {
  std::string path;
  std::optional<int64_t> deletion_timestamp;
  bool data_change = true;
  bool extended_file_metadata = false;
  std::map<std::string, std::optional<std::string>> partition_values;
  std::optional<int64_t> size;
  bool has_deletion_vector = false;
};

struct TxnAction {
  std::string app_id;
  int64_t version = 0;
  std::optional<int64_t> last_updated;
};

struct DomainMetadataAction {
  std::string domain;
  std::string configuration;
  bool removed = false;
};

struct CommitInfoAction {
  boost::json::object fields;  // as written; timestamp/inCommitTimestamp/operation read from it
  std::optional<int64_t> Timestamp() const;  // inCommitTimestamp, else timestamp
  std::optional<int64_t> InCommitTimestamp() const;
};

// One log line, decoded. Exactly one of the members is set, or none for an action this library
// skips (cdc, unknown kinds).
struct Action {
  std::optional<ProtocolAction> protocol;
  std::optional<MetadataAction> metadata;
  std::optional<AddAction> add;
  std::optional<RemoveAction> remove;
  std::optional<TxnAction> txn;
  std::optional<DomainMetadataAction> domain_metadata;
  std::optional<CommitInfoAction> commit_info;
};

// Decodes one action from a JSON object ({"add": {...}}). InvalidArgument naming the field.
Result<Action> ActionFromJson(const boost::json::object& object);
// Decodes one line of a commit file.
Result<Action> ParseActionLine(std::string_view line);
// Decodes a whole commit file; errors say "line N: ...".
Result<std::vector<Action>> ParseCommit(std::string_view text);

// Encodes one action as a JSON object / a line without its newline.
boost::json::object ActionToJson(const Action& action);
std::string ActionLine(const Action& action);

// "00000000000000000007.json", "00000000000000000010.checkpoint.parquet".
std::string CommitFileName(int64_t version);
std::string CheckpointFileName(int64_t version);
// The version of a commit file name, or nullopt when `name` is not one.
std::optional<int64_t> ParseCommitFileName(std::string_view name);

// Paths in add/remove actions are URIs: a relative path's characters outside the unreserved
// set are %-escaped. Hive partition directory names escape characters first as Spark does
// (EscapePartitionValue), so "a:b" is the directory "k=a%3Ab" and the path "k=a%253Ab".
std::string EscapePartitionValue(std::string_view value);
std::string EncodePathUri(std::string_view path);
Result<std::string> DecodePathUri(std::string_view uri);

}  // namespace trainyard::tables
