//! The effects shell of proxy-operator: everything that does I/O around the pure
//! `proxy-core`. Two programs share one [`runtime`] layer: [`operator`] (`proxy-operator
//! run`) and [`gateway`] (`proxy-operator gateway`); each owns its flags, [`cli`] names the
//! subcommands, and `main.rs` only dispatches them. Each other module is one part or one
//! concern of the operator (docs/architecture.md draws the layers).

pub mod cli;
pub mod commands;
pub mod config;
pub mod controller;
pub mod credentials;
pub mod deadline;
pub mod dedicated;
pub mod discovery;
pub mod duration;
pub mod events;
pub mod gate;
pub mod gateway;
pub mod gc;
pub mod health;
pub mod leadership;
pub mod lease_book;
pub mod locks;
pub mod operator;
pub mod per_proxy;
pub mod pool;
pub mod provider_health;
pub mod providers;
pub mod recorder;
pub mod runtime;
pub mod tasks;
pub mod time;
pub mod tracked;
pub mod wire;
pub mod writes;
