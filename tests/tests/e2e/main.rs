//! Tests against the real test bed: one kube-apiserver and etcd for this whole binary, a
//! namespace per test, real squid processes. See `proxy_tests` for the parts.

mod api_fuzz;
mod chaos;
mod chart;
mod concurrency;
mod crawlers;
mod crd;
mod credentials;
mod egress;
mod events;
mod freed;
mod gate;
mod gateway;
mod gc;
mod gcp;
mod gcp_faults;
mod health;
mod hostile;
mod image;
mod kvm;
mod leadership;
mod lease_book;
mod leases;
mod metrics;
mod operated;
mod pods;
mod pools;
mod prober;
mod probes;
mod provider_health;
mod reconcile;
mod replay;
mod servers;
mod startup;
mod stays_ready;
