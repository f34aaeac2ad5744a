//! The test bed: real parts, no mocks of Kubernetes.
//!
//! - [`control_plane`]: a real `kube-apiserver` and `etcd` (built from the Go module proxy by
//!   `tests/bed/provision.sh`) on reserved loopback ports ([`ports`]), started once per test
//!   binary and shared; each test gets its own namespace
//!   ([`control_plane::ControlPlane::namespace`]).
//! - [`pod_runner`]: the kubelet stand-in. It registers a Node, binds Pods to it, starts one
//!   real `squid` per Pod on its own loopback address and reports the Pod Running.
//! - [`libvirt`]: a session-mode `libvirtd` with a storage pool holding the guest image, for
//!   the kvm provider's real VMs.
//! - [`gateway`]: the gateway (`proxy-operator gateway`) as a real process, with a tenant.
//! - [`probe_origin`]: a local HTTPS origin with its own CA, named `probe.test`, that squid
//!   reaches through a hosts file.
//! - [`otlp`]: a local OTLP/HTTP receiver, and the spans it got.
//! - [`log_lines`]: the check every [`operator::Operator`] makes of its JSON log when it
//!   stops: each line one JSON value, each key once per object.
//!
//! Every process the bed starts carries the run directory in its command line, and
//! `tests/bed/reap.sh` kills them all when the test process ends, however it ends.

pub mod bins;
pub mod certs;
pub mod control_plane;
pub mod gateway;
pub mod gce;
pub mod leadership_load;
pub mod libvirt;
pub mod log_lines;
pub mod operator;
pub mod otlp;
pub mod pod_runner;
pub mod ports;
pub mod probe_origin;
pub mod process_usage;
pub mod proxy_status;
pub mod reserved;
pub mod run_dir;
pub mod squid;
pub mod write_counts;
