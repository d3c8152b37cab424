#include "trainyard/cli/table_data_commands.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "trainyard/cli/client.h"
#include "trainyard/cli/table.h"
#include "trainyard/common/json.h"
#include "trainyard/common/strings.h"

namespace trainyard::cli {
namespace {

constexpr const char* kTables = "/api/trainyard/v1/tables/";

struct Args {
  std::string name, file, mode = "append", format, run_id;
  std::string predicate, column, kind;
  std::vector<std::string> except;
  int64_t version = -1;
  int64_t n = 10;
};

std::string Mb(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

std::string Extension(const std::string& file) {
  size_t dot = file.rfind('.');
  return dot == std::string::npos ? "" : file.substr(dot + 1);
}

json::object VersionQuery(const Args& a) {
  json::object q;
  if (a.version >= 0) q["version"] = std::to_string(a.version);
  return q;
}

int Import(Client& client, const Args& a) {
  std::ifstream in(a.file, std::ios::binary);
  if (!in) return Fail(Status::NotFound("cannot open " + a.file));
  std::stringstream data;
  data << in.rdbuf();
  std::string body = std::move(data).str();
  std::string format = a.format.empty() ? Extension(a.file) : a.format;
  if (format == "ndjson" || format == "json") format = "jsonl";
  json::object q{{"format", format}, {"mode", a.mode}, {"source_name", a.file}};
  if (!a.run_id.empty()) q["run_id"] = a.run_id;
  std::cerr << "uploading " << a.file << " (" << Mb(body.size()) << ")...\n";
  auto r = client.PostRaw(kTables + a.name + "/import", q, body);
  if (!r.ok()) return Fail(r.status());
  auto parsed = ParseJsonExact(r->body);
  if (!parsed.ok()) return Fail(parsed.status());
  std::cout << "Imported " << Int(*parsed, "rows") << " rows (" << Mb(body.size()) << ") into "
            << a.name << " at version " << Int(*parsed, "version")
            << (parsed->at("created").as_bool() ? " (table created)" : "") << "\n";
  return 0;
}

// "last4 except pii-readers, bob".
std::string MaskText(const json::value& mask) {
  std::string out = Str(mask, "kind");
  std::string except;
  for (const auto& name : Arr(mask, "except")) {
    except += (except.empty() ? "" : ", ") + std::string(name.as_string());
  }
  return except.empty() ? out : out + " except " + except;
}

bool AppliesToCaller(const json::value& policy) {
  const json::object& o = policy.as_object();
  return o.contains("applies_to_caller") && o.at("applies_to_caller").as_bool();
}

int Show(Client& client, const Args& a) {
  auto d = client.Call("GET", kTables + a.name, VersionQuery(a));
  if (!d.ok()) return Fail(d.status());
  const json::object& o = d->as_object();
  std::string filter = "-";
  if (o.contains("row_filter")) {
    const json::value& f = o.at("row_filter");
    filter = Str(f, "predicate") + (AppliesToCaller(f) ? " (applies to you)" : " (not to you)");
  }
  std::string location = Str(*d, "storage_location");
  if (location.empty()) location = "(hidden: a row filter or column masks apply to you)";
  std::vector<std::vector<std::string>> facts = {
      {"name", Str(*d, "full_name")},
      {"owner", Str(*d, "owner")},
      {"type", Str(*d, "table_type") + " " + Str(*d, "data_source_format")},
      {"location", location},
      {"row filter", filter},
      {"version", std::to_string(Int(*d, "version"))},
      {"updated", FormatTime(Int(*d, "timestamp_ms"))},
      {"rows", d->as_object().contains("num_rows") ? std::to_string(Int(*d, "num_rows")) : "?"},
      {"files", std::to_string(Int(*d, "num_files"))},
      {"size", Mb(static_cast<size_t>(Int(*d, "size_bytes")))}};
  std::string partitions;
  for (const auto& p : Arr(*d, "partition_columns")) {
    partitions += (partitions.empty() ? "" : ", ") + std::string(p.as_string());
  }
  facts.push_back({"partitioned by", partitions.empty() ? "-" : partitions});
  PrintTable(std::cout, {"FIELD", "VALUE"}, facts, 100);
  std::vector<std::vector<std::string>> columns;
  for (const auto& c : Arr(*d, "columns")) {
    std::string mask = "-";
    if (c.as_object().contains("mask")) {
      const json::value& m = c.at("mask");
      mask = MaskText(m) + (AppliesToCaller(m) ? " (applies to you)" : " (not to you)");
    }
    columns.push_back(
        {Str(c, "name"), Str(c, "type"), c.at("nullable").as_bool() ? "yes" : "no", mask});
  }
  std::cout << "\n";
  PrintTable(std::cout, {"COLUMN", "TYPE", "NULLABLE", "MASK"}, columns, 80);
  return 0;
}

// Prints a table's policies as the set/clear calls return them.
int PrintPolicies(const Result<json::value>& r, const std::string& done) {
  if (!r.ok()) return Fail(r.status());
  std::cout << done << "\n";
  const json::object& o = r->as_object();
  std::cout << "row filter: "
            << (o.contains("row_filter") ? Str(o.at("row_filter"), "predicate") : "-") << "\n";
  std::vector<std::vector<std::string>> rows;
  if (o.contains("column_masks") && o.at("column_masks").is_object()) {
    for (const auto& kv : o.at("column_masks").as_object()) {
      rows.push_back({std::string(kv.key()), MaskText(kv.value())});
    }
  }
  if (!rows.empty()) PrintTable(std::cout, {"COLUMN", "MASK"}, rows, 80);
  return 0;
}

int SetRowFilter(Client& client, const Args& a) {
  return PrintPolicies(
      client.Call("PUT", kTables + a.name + "/row-filter", {{"predicate", a.predicate}}),
      "Set the row filter of " + a.name);
}

int ClearRowFilter(Client& client, const Args& a) {
  return PrintPolicies(client.Call("DELETE", kTables + a.name + "/row-filter"),
                       "Cleared the row filter of " + a.name);
}

std::string MaskPath(const Args& a) {
  return kTables + a.name + "/columns/" + UrlEncode(a.column) + "/mask";
}

int SetMask(Client& client, const Args& a) {
  json::array except;
  for (const auto& name : a.except) except.emplace_back(name);
  return PrintPolicies(
      client.Call("PUT", MaskPath(a), {{"kind", a.kind}, {"except", std::move(except)}}),
      "Set the mask of " + a.name + "." + a.column);
}

int ClearMask(Client& client, const Args& a) {
  return PrintPolicies(client.Call("DELETE", MaskPath(a)),
                       "Cleared the mask of " + a.name + "." + a.column);
}

std::string MapText(const json::value& m) {
  std::string out;
  if (!m.is_object()) return out;
  for (const auto& kv : m.as_object()) {
    out += (out.empty() ? "" : " ") + std::string(kv.key()) + "=" +
           (kv.value().is_string() ? std::string(kv.value().as_string())
                                   : json::serialize(kv.value()));
  }
  return out;
}

// A commit's userMetadata: a JSON object as key=value pairs, without the dotted prefix all its
// keys share (prep's {"trainyard.prep.pipeline": ..., "trainyard.prep.version": ...} reads
// "pipeline=support-prep version=67d8e0..."), so the values fit the column; other text as is.
std::string UserMetadataText(const std::string& text) {
  Result<json::object> o = ParseJsonObject(text);
  if (!o.ok() || o->empty()) return text;
  std::string prefix(o->begin()->key());
  prefix = prefix.substr(0, prefix.rfind('.') + 1);
  for (const auto& kv : *o) {
    while (!prefix.empty() && std::string_view(kv.key()).substr(0, prefix.size()) != prefix) {
      size_t dot = prefix.size() >= 2 ? prefix.rfind('.', prefix.size() - 2) : std::string::npos;
      prefix = dot == std::string::npos ? "" : prefix.substr(0, dot + 1);
    }
  }
  json::object shown;
  for (const auto& kv : *o) shown[std::string(kv.key()).substr(prefix.size())] = kv.value();
  return MapText(shown);
}

int History(Client& client, const Args& a) {
  json::object q;
  if (a.n > 0) q["limit"] = std::to_string(a.n);
  auto h = client.Call("GET", kTables + a.name + "/history", q);
  if (!h.ok()) return Fail(h.status());
  std::vector<std::vector<std::string>> rows;
  for (const auto& e : Arr(*h, "history")) {
    std::string user = Str(e, "user_name");
    rows.push_back({std::to_string(Int(e, "version")), FormatTime(Int(e, "timestamp_ms")),
                    Str(e, "operation"), user.empty() ? "-" : user,
                    MapText(e.at("operation_parameters")), MapText(e.at("operation_metrics")),
                    UserMetadataText(Str(e, "user_metadata"))});
  }
  PrintTable(std::cout,
             {"VERSION", "TIME", "OPERATION", "USER", "PARAMETERS", "METRICS", "USER METADATA"},
             rows, 60);
  return 0;
}

int Head(Client& client, const Args& a) {
  json::object q = VersionQuery(a);
  q["max_rows"] = std::to_string(a.n);
  q["format"] = "jsonl";
  auto r = client.GetRaw(kTables + a.name + "/rows", q);
  if (!r.ok()) return Fail(r.status());
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  JsonLinesToCells(r->body, &header, &rows);
  PrintTable(std::cout, header, rows);
  auto version = r->headers.find("x-trainyard-table-version");
  if (version != r->headers.end()) {
    std::cout << "\n(" << rows.size() << " rows at version " << version->second << ")\n";
  }
  return 0;
}

int Export(Client& client, const Args& a) {
  json::object q = VersionQuery(a);
  std::string format = a.format.empty() ? Extension(a.file) : a.format;
  if (format == "ndjson") format = "jsonl";
  if (format == "arrows") format = "arrow";
  q["format"] = format;
  auto r = client.GetRaw(kTables + a.name + "/export", q);
  if (!r.ok()) return Fail(r.status());
  std::string tmp = a.file + ".partial";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(r->body.data(), static_cast<std::streamsize>(r->body.size()));
    if (!out) return Fail(Status::IOError("cannot write " + tmp));
  }
  if (std::rename(tmp.c_str(), a.file.c_str()) != 0) {
    return Fail(Status::IOError("cannot rename " + tmp + " to " + a.file));
  }
  auto version = r->headers.find("x-trainyard-table-version");
  std::cout << "Exported " << a.name
            << (version != r->headers.end() ? " at version " + version->second : "") << " to "
            << a.file << " (" << Mb(r->body.size()) << ")\n";
  return 0;
}

CLI::App* TablesGroup(CLI::App& app) {
  auto found = app.get_subcommands([](CLI::App* c) { return c->get_name() == "tables"; });
  CLI::App* group =
      found.empty() ? app.add_subcommand("tables", "catalog tables and their data") : found.front();
  group->require_subcommand(1);
  return group;
}

}  // namespace

void JsonLinesToCells(const std::string& body, std::vector<std::string>* header,
                      std::vector<std::vector<std::string>>* rows) {
  std::istringstream lines(body);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    auto parsed = ParseJsonObject(line);
    if (!parsed.ok()) continue;
    if (header->empty()) {
      for (const auto& kv : *parsed) header->push_back(std::string(kv.key()));
    }
    std::vector<std::string> cells;
    for (const std::string& column : *header) {
      auto it = parsed->find(column);
      if (it == parsed->end() || it->value().is_null()) {
        cells.push_back("");
      } else {
        cells.push_back(it->value().is_string() ? std::string(it->value().as_string())
                                                : json::serialize(it->value()));
      }
    }
    rows->push_back(std::move(cells));
  }
}

std::function<std::optional<int>(Client&)> AddTableDataCommands(
    CLI::App& app, const std::function<void(CLI::App*)>& add_client_options) {
  auto a = std::make_shared<Args>();
  CLI::App* group = TablesGroup(app);
  using Runner = int (*)(Client&, const Args&);
  std::vector<std::pair<CLI::App*, Runner>> commands;
  auto add = [&](const char* name, const char* help, Runner run) {
    CLI::App* c = group->add_subcommand(name, help);
    c->add_option("name", a->name, "catalog.schema.table")->required();
    add_client_options(c);
    commands.emplace_back(c, run);
    return c;
  };
  CLI::App* import =
      add("import", "import a JSONL, CSV or Parquet file (creates the table)", Import);
  import->add_option("file", a->file, "data.jsonl | data.csv | data.parquet")->required();
  import->add_option("--mode", a->mode, "append (default) or overwrite");
  import->add_option("--format", a->format, "jsonl, csv or parquet (default: by extension)");
  import->add_option("--run-id", a->run_id, "the run this import belongs to (lineage)");
  add("show", "describe a table: schema, version, rows, files, size", Show)
      ->add_option("--version", a->version, "an older version");
  add("history", "a table's versions, newest first", History)
      ->add_option("-n", a->n, "at most N entries (0: all)");
  CLI::App* head = add("head", "the first rows of a table", Head);
  head->add_option("-n", a->n, "rows (default 10)");
  head->add_option("--version", a->version, "an older version");
  CLI::App* exp = add("export", "export a table to a file", Export);
  exp->add_option("file", a->file, "out.jsonl | .csv | .parquet | .arrow")->required();
  exp->add_option("--version", a->version, "an older version");
  exp->add_option("--format", a->format, "jsonl, csv, parquet or arrow (default: by extension)");
  add("set-row-filter",
      "only rows where a predicate holds for the reader: \"region = 'EU' OR "
      "is_member('support-leads')\" (owner or MANAGE)",
      SetRowFilter)
      ->add_option("predicate", a->predicate,
                   "the filter grammar plus current_user() and is_member('group')")
      ->required();
  add("clear-row-filter", "remove a table's row filter", ClearRowFilter);
  CLI::App* set_mask = add("set-mask", "mask a column for readers outside --except", SetMask);
  set_mask->add_option("column", a->column, "the column")->required();
  set_mask->add_option("--kind", a->kind, "redact, hash, null or last4")->required();
  set_mask->add_option("--except", a->except,
                       "a group, user or service principal that sees raw values (repeatable)");
  CLI::App* clear_mask = add("clear-mask", "remove a column's mask", ClearMask);
  clear_mask->add_option("column", a->column, "the column")->required();
  return [a, commands](Client& client) -> std::optional<int> {
    for (const auto& [command, run] : commands) {
      if (command->parsed()) return run(client, *a);
    }
    return std::nullopt;
  };
}

}  // namespace trainyard::cli
