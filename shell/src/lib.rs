//! The effects shell of proxy-operator: everything that does I/O around the pure
//! `proxy-core`. Each module is one concern; `main.rs` only wires them.

pub mod admin;
pub mod config;
pub mod controller;
pub mod discovery;
pub mod gate;
pub mod gc;
pub mod health;
pub mod leadership;
pub mod metrics;
pub mod providers;
pub mod recorder;
pub mod server;
pub mod supervise;
pub mod telemetry;
pub mod time;
