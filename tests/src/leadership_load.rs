//! Load on an operator's leadership, for bench-scale (issue 20, goal 6): the age of its
//! leadership Lease's `spec.renewTime`, sampled every 250 ms ([`Sampler`]), and concurrent
//! `GET /v1/proxies` loops and lease acquire+release loops against its discovery API
//! ([`Load`]).
//!
//! The sampler runs on a thread and runtime of its own (the operator's [`Dedicated`]), with
//! its own client, so that the load loops of this process do not delay the samples and
//! inflate the ages it reports.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use proxy_operator::dedicated::Dedicated;
use proxy_operator::time::from_kube;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::operator::DISCOVERY_TOKEN;

/// How often the renew age is sampled.
pub const SAMPLE: Duration = Duration::from_millis(250);

/// Whose leadership Lease to sample.
#[derive(Debug, Clone)]
pub struct Watched {
    /// The leadership Lease's namespace.
    pub namespace: String,
    /// The leadership Lease's name.
    pub lease: String,
    /// The operator's identity: a sample that names another holder is a lost claim.
    pub identity: String,
}

/// The renew-age sampler, running until dropped or [`Sampler::stop`]ped.
#[derive(Debug)]
pub struct Sampler {
    thread: Dedicated,
    samples: Arc<Mutex<Samples>>,
}

/// The samples of one phase.
#[derive(Debug, Default, Clone)]
pub struct RenewAges {
    /// Each sample's `now - spec.renewTime` while the operator held the Lease, sorted.
    pub ages: Vec<Duration>,
    /// Samples where the Lease named another holder, or none, or could not be read.
    pub not_held: usize,
}

/// The load to put on one operator.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The operator's discovery API (`http://127.0.0.1:PORT`).
    pub discovery: String,
    /// Clients that list all proxies back to back.
    pub listers: usize,
    /// Clients that acquire and release a lease back to back.
    pub leasers: usize,
}

/// The load, running until [`Load::finish`].
#[derive(Debug)]
pub struct Load {
    stop: watch::Sender<bool>,
    clients: JoinSet<Counts>,
    started: Instant,
}

/// What the load measured.
#[derive(Debug, Default, Clone)]
pub struct Measured {
    /// How long it ran.
    pub window: Duration,
    /// Answered lists.
    pub lists: usize,
    /// Failed lists.
    pub list_errors: usize,
    /// Acquire+release pairs that both succeeded, and their durations, sorted.
    pub lease_pairs: Vec<Duration>,
    /// Pairs that failed (a refused acquire, a 503 while the leader is unknown, an error).
    pub lease_errors: usize,
}

type Samples = RenewAges;

impl Sampler {
    /// Starts sampling; `config` is how the sampler reaches the API server.
    pub fn start(watched: &Watched, config: kube::Config) -> anyhow::Result<Self> {
        let samples = Arc::new(Mutex::new(Samples::default()));
        let thread = Dedicated::spawn("renew-sampler", {
            let (watched, samples) = (watched.clone(), samples.clone());
            move || sample(config, watched, samples)
        })?;
        Ok(Self { thread, samples })
    }

    /// The samples since the last take (or the start), sorted: one phase's.
    pub fn take(&self) -> RenewAges {
        let mut taken = std::mem::take(&mut *self.samples.lock().expect("samples"));
        taken.ages.sort();
        taken
    }

    /// Stops sampling.
    pub async fn stop(self) {
        self.thread.stop().await;
    }
}

#[derive(Debug, Default)]
struct Counts {
    lists: usize,
    list_errors: usize,
    pairs: Vec<Duration>,
    lease_errors: usize,
}

impl Load {
    /// Starts the clients.
    pub fn start(settings: &Settings) -> Self {
        let (stop, stopped) = watch::channel(false);
        let mut clients = JoinSet::new();
        let http = reqwest::Client::new();
        for _ in 0..settings.listers {
            clients.spawn(lister(
                http.clone(),
                settings.discovery.clone(),
                stopped.clone(),
            ));
        }
        for _ in 0..settings.leasers {
            clients.spawn(leaser(
                http.clone(),
                settings.discovery.clone(),
                stopped.clone(),
            ));
        }
        Self {
            stop,
            clients,
            started: Instant::now(),
        }
    }

    /// Stops everything and returns what was measured.
    pub async fn finish(self) -> Measured {
        let window = self.started.elapsed();
        let _ = self.stop.send(true);
        let mut measured = Measured {
            window,
            ..Measured::default()
        };
        for counts in self.clients.join_all().await {
            measured.lists += counts.lists;
            measured.list_errors += counts.list_errors;
            measured.lease_pairs.extend(counts.pairs);
            measured.lease_errors += counts.lease_errors;
        }
        measured.lease_pairs.sort();
        measured
    }
}

/// Lists every proxy until `stopped`.
async fn lister(http: reqwest::Client, base: String, mut stopped: watch::Receiver<bool>) -> Counts {
    let mut counts = Counts::default();
    let url = format!("{base}/v1/proxies");
    while !*stopped.borrow() {
        let list = async {
            let response = http.get(&url).bearer_auth(DISCOVERY_TOKEN).send().await?;
            let ok = response.status().is_success();
            response.bytes().await?;
            anyhow::Ok(ok)
        };
        tokio::select! {
            result = list => match result {
                Ok(true) => counts.lists += 1,
                _ => counts.list_errors += 1,
            },
            _ = stopped.changed() => break,
        }
    }
    counts
}

/// Acquires a lease and releases it until `stopped`.
async fn leaser(http: reqwest::Client, base: String, mut stopped: watch::Receiver<bool>) -> Counts {
    let mut counts = Counts::default();
    let body = r#"{"selector": {"geo": "eu"}, "target": "example.com", "ttlSeconds": 60}"#;
    while !*stopped.borrow() {
        let pair = async {
            let at = Instant::now();
            let lease: serde_json::Value = http
                .post(format!("{base}/v1/leases"))
                .bearer_auth(DISCOVERY_TOKEN)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            let id = lease["leaseID"]
                .as_str()
                .ok_or_else(|| anyhow::anyhow!("no leaseID in {lease}"))?;
            http.delete(format!("{base}/v1/leases/{id}"))
                .bearer_auth(DISCOVERY_TOKEN)
                .send()
                .await?
                .error_for_status()?;
            anyhow::Ok(at.elapsed())
        };
        tokio::select! {
            result = pair => match result {
                Ok(took) => counts.pairs.push(took),
                Err(_) => {
                    counts.lease_errors += 1;
                    // A refused acquire answers at once: do not spin on it.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = stopped.changed() => break,
        }
    }
    counts
}

/// Reads the leadership Lease every [`SAMPLE`] (on the sampler's own thread) until stopped.
async fn sample(config: kube::Config, watched: Watched, samples: Arc<Mutex<Samples>>) {
    let client = kube::Client::try_from(config).expect("a client for the sampler");
    let leases: Api<Lease> = Api::namespaced(client, &watched.namespace);
    let mut every = tokio::time::interval(SAMPLE);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let spec = leases
            .get_opt(&watched.lease)
            .await
            .ok()
            .flatten()
            .and_then(|lease| lease.spec);
        let now = jiff::Timestamp::now();
        let age = spec
            .filter(|spec| spec.holder_identity.as_deref() == Some(watched.identity.as_str()))
            .and_then(|spec| spec.renew_time)
            .and_then(|MicroTime(renewed)| from_kube(renewed))
            .and_then(|renewed| Duration::try_from(now.duration_since(renewed)).ok());
        let mut samples = samples.lock().expect("samples");
        match age {
            Some(age) => samples.ages.push(age),
            None => samples.not_held += 1,
        }
    }
}

/// The `p`-th percentile (0..=100) of `sorted`.
pub fn percentile(sorted: &[Duration], p: usize) -> Duration {
    let index = (sorted.len().saturating_sub(1) * p).div_ceil(100);
    sorted.get(index).copied().unwrap_or_default()
}
