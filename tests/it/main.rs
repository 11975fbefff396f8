//! carte's integration tests: one binary (each test file of the old layout is a
//! module here), so `cargo test` links the whole tree once instead of once per file.
//! Every test drives the real `carte` binary (`CARGO_BIN_EXE_carte`) through
//! [`common`]'s harness.

mod common;

mod architecture;
mod audit;
mod bounds;
mod check;
mod cli;
mod clients;
mod data;
mod discovery;
mod docs;
mod effect_command;
mod effect_http;
mod examples;
mod http;
mod import;
mod jq;
mod live_resources;
mod mcp_headers;
mod metrics;
mod migrations;
mod mrtr;
mod oauth;
mod postgres;
mod presentation;
mod preview;
mod protocol;
mod rate_limits;
mod reload;
mod reload_torture;
mod replicas;
mod reservo;
mod resource_effects;
mod runners;
mod schema;
mod secrets;
mod skills;
mod sql;
mod sql_rollback;
mod stateless;
mod steps;
mod tasks;
mod token_exchange;
mod toolsets;
mod traces;
mod untrusted_input;
