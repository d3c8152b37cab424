#include "trainyard/cli/security_commands.h"

#include <termios.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <iterator>
#include <memory>

#include "trainyard/cli/client.h"
#include "trainyard/cli/table.h"
#include "trainyard/common/strings.h"

namespace trainyard::cli {
namespace {

const std::string kProjects = "/api/trainyard/v1/projects";

// The secret's value: all of stdin when it is not a terminal (one trailing newline dropped),
// otherwise a prompt without echo.
Result<std::string> ReadSecretValue(const std::string& name) {
  std::string value;
  if (::isatty(STDIN_FILENO)) {
    std::cerr << "Value of secret " << name << " (not shown): " << std::flush;
    termios old{};
    bool restore = ::tcgetattr(STDIN_FILENO, &old) == 0;
    if (restore) {
      termios quiet = old;
      quiet.c_lflag &= ~static_cast<tcflag_t>(ECHO);
      ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet);
    }
    std::getline(std::cin, value);
    if (restore) ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &old);
    std::cerr << "\n";
  } else {
    value.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    if (!value.empty() && value.back() == '\n') value.pop_back();
    if (!value.empty() && value.back() == '\r') value.pop_back();
  }
  if (value.empty()) {
    return Status::InvalidArgument(
        "the secret's value is empty; pipe it on stdin (e.g. "
        "'trainyard secrets create " +
        name + " < token.txt') or type it at the prompt");
  }
  return value;
}

int PrintProject(const json::value& r) {
  const json::value& p = r.as_object().at("project");
  std::string members;
  for (const auto& m : Arr(p, "members"))
    if (m.is_string()) members += (members.empty() ? "" : ", ") + std::string(m.as_string());
  std::cout << "Project:           " << Str(p, "name") << "\n"
            << "Priority ceiling:  " << Str(p, "priority_ceiling") << "\n"
            << "Members:           "
            << (Str(p, "open") == "true" ? "everyone"
                : members.empty()        ? "(none)"
                                         : members)
            << "\n";
  return 0;
}

}  // namespace

std::function<std::optional<int>(Client&)> AddSecurityCommands(
    CLI::App& app, CLI::App& users, const std::function<void(CLI::App*)>& add_client_options) {
  struct Args {
    std::string project, user, name, secret_project;
    int ceiling = 0;
  };
  auto a = std::make_shared<Args>();

  auto* projects = app.add_subcommand("projects", "projects: members and priority ceiling");
  projects->require_subcommand(1);
  auto* p_create = projects->add_subcommand("create", "create a project (admins)");
  p_create->add_option("project", a->project, "project name")->required();
  p_create->add_option("--ceiling", a->ceiling, "highest priority its members may use")
      ->capture_default_str();
  auto* p_list = projects->add_subcommand("list", "list projects");
  auto* p_show = projects->add_subcommand("show", "show a project's members and ceiling");
  p_show->add_option("project", a->project, "project name")->required();
  auto* p_add = projects->add_subcommand("add-member", "add a member (admins)");
  p_add->add_option("project", a->project, "project name")->required();
  p_add->add_option("user", a->user, "user name")->required();
  auto* p_remove = projects->add_subcommand("remove-member", "remove a member (admins)");
  p_remove->add_option("project", a->project, "project name")->required();
  p_remove->add_option("user", a->user, "user name")->required();
  auto* p_ceiling = projects->add_subcommand("set-ceiling", "set the priority ceiling (admins)");
  p_ceiling->add_option("project", a->project, "project name")->required();
  p_ceiling->add_option("ceiling", a->ceiling, "highest priority, -1000..1000")->required();
  for (auto* c : {p_create, p_list, p_show, p_add, p_remove, p_ceiling}) add_client_options(c);

  auto* secrets = app.add_subcommand("secrets", "secrets that job specs reference by name");
  secrets->require_subcommand(1);
  auto* s_create = secrets->add_subcommand(
      "create", "store a secret (its value is read from stdin or a prompt, never from argv)");
  s_create->add_option("name", a->name, "secret name")->required();
  s_create->add_option("--project", a->secret_project,
                       "let this project's members use it (default: only you)");
  auto* s_list = secrets->add_subcommand("list", "list the secrets you may use (names only)");
  auto* s_delete = secrets->add_subcommand("delete", "delete a secret");
  s_delete->add_option("name", a->name, "secret name")->required();
  for (auto* c : {s_create, s_list, s_delete}) add_client_options(c);

  auto* u_disable = users.add_subcommand("disable", "disable a user: their tokens stop working");
  auto* u_enable = users.add_subcommand("enable", "enable a disabled user");
  auto* u_delete = users.add_subcommand("delete", "delete a user and revoke their tokens");
  for (auto* c : {u_disable, u_enable, u_delete}) {
    c->add_option("name", a->user, "user name")->required();
    add_client_options(c);
  }

  return [=](Client& client) -> std::optional<int> {
    auto done = [](const Result<json::value>& r, const std::string& message) {
      if (!r.ok()) return Fail(r.status());
      std::cout << message << "\n";
      return 0;
    };
    std::string project_path = kProjects + "/" + UrlEncode(a->project);
    if (p_create->parsed()) {
      auto r =
          client.Call("POST", kProjects, {{"name", a->project}, {"priority_ceiling", a->ceiling}});
      return done(r, "Created project " + a->project + " (priority ceiling " +
                         std::to_string(a->ceiling) + ")");
    }
    if (p_list->parsed()) {
      auto r = client.Call("GET", kProjects);
      if (!r.ok()) return Fail(r.status());
      std::vector<std::vector<std::string>> rows;
      for (const auto& p : Arr(*r, "projects")) {
        rows.push_back(
            {Str(p, "name"), Str(p, "priority_ceiling"),
             Str(p, "open") == "true" ? "everyone" : std::to_string(Arr(p, "members").size())});
      }
      PrintTable(std::cout, {"PROJECT", "CEILING", "MEMBERS"}, rows);
      return 0;
    }
    if (p_show->parsed()) {
      auto r = client.Call("GET", project_path);
      if (!r.ok()) return Fail(r.status());
      return PrintProject(*r);
    }
    if (p_add->parsed()) {
      auto r = client.Call("POST", project_path + "/members", {{"user", a->user}});
      return done(r, "Added " + a->user + " to project " + a->project);
    }
    if (p_remove->parsed()) {
      auto r = client.Call("DELETE", project_path + "/members/" + UrlEncode(a->user));
      return done(r, "Removed " + a->user + " from project " + a->project);
    }
    if (p_ceiling->parsed()) {
      auto r = client.Call("POST", project_path + "/ceiling", {{"priority_ceiling", a->ceiling}});
      return done(r, "Project " + a->project + ": priority ceiling " + std::to_string(a->ceiling));
    }
    if (s_create->parsed()) {
      auto value = ReadSecretValue(a->name);
      if (!value.ok()) return Fail(value.status());
      json::object body{{"name", a->name}, {"value", *value}};
      if (!a->secret_project.empty()) body["project"] = a->secret_project;
      auto r = client.Call("POST", "/api/trainyard/v1/secrets", body);
      return done(r, "Created secret " + a->name +
                         (a->secret_project.empty() ? "" : " for project " + a->secret_project));
    }
    if (s_list->parsed()) {
      auto r = client.Call("GET", "/api/trainyard/v1/secrets");
      if (!r.ok()) return Fail(r.status());
      std::vector<std::vector<std::string>> rows;
      for (const auto& s : Arr(*r, "secrets")) {
        rows.push_back(
            {Str(s, "name"), Str(s, "owner"), Str(s, "project"), FormatTime(Int(s, "created_at"))});
      }
      PrintTable(std::cout, {"SECRET", "OWNER", "PROJECT", "CREATED"}, rows);
      return 0;
    }
    if (s_delete->parsed()) {
      auto r = client.Call("DELETE", "/api/trainyard/v1/secrets/" + UrlEncode(a->name));
      return done(r, "Deleted secret " + a->name);
    }
    std::string user_path = "/api/trainyard/v1/users/" + UrlEncode(a->user);
    if (u_disable->parsed()) {
      return done(client.Call("POST", user_path + "/disable"), "Disabled user " + a->user);
    }
    if (u_enable->parsed()) {
      return done(client.Call("POST", user_path + "/enable"), "Enabled user " + a->user);
    }
    if (u_delete->parsed()) {
      return done(client.Call("DELETE", user_path), "Deleted user " + a->user);
    }
    return std::nullopt;
  };
}

}  // namespace trainyard::cli
