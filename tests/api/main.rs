//! Integration tests of the server face: OpenViking's HTTP API and MCP served by a real
//! `vikingfs serve`, driven by plain HTTP and by the real clients (OpenViking's Python SDK, its
//! `ov` command, the reference MCP client).

#[path = "../support/mod.rs"]
mod support;

mod api_abuse;
mod api_access;
mod api_clients_search;
mod api_envelope;
mod api_fs;
mod api_fs_clients;
mod api_keys;
mod api_limits;
mod api_mcp;
mod api_routes;
mod api_search;
mod api_sessions;
mod api_surface;
mod api_undo;
mod cli_daemon;
