//! The effects shell of proxy-operator: everything that does I/O around the pure
//! `proxy-core`. Each module is one concern: [`args`] parses the flags, [`wiring`] builds the
//! parts from them, [`loops`] runs them; `main.rs` only dispatches the subcommands.

pub mod admin;
pub mod args;
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
pub mod locks;
pub mod loops;
pub mod metrics;
pub mod per_proxy;
pub mod pool;
pub mod provider_health;
pub mod providers;
pub mod recorder;
pub mod server;
pub mod supervise;
pub mod telemetry;
pub mod time;
pub mod tracked;
pub mod wiring;
pub mod writes;
