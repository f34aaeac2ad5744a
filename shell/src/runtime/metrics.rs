//! The metrics registry of one process, and its encoder (served as `GET /metrics` by the
//! admin router, [`super::admin`]).
//!
//! Each component registers the families it counts into ([`Registry::families`]) when it is
//! built, and keeps them in a struct of its own (the providers' calls, the probes, GC, the
//! leader gate, the reconciles, ...): nothing takes a process-wide metrics object to call
//! one method of it. What is better read than counted is read when scraped: a component
//! hands the registry its [`Gauges`] ([`Registry::read_at_scrape`]), held weakly.
//!
//! Names follow Prometheus conventions: the `proxy_operator_` prefix (added here), units in
//! the name, `_total` on counters.

use std::sync::{Arc, Mutex, Weak};

use prometheus_client::collector::Collector;
pub use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;

use crate::locks::lock;

/// The prefix of every metric name.
const PREFIX: &str = "proxy_operator";

/// Every metric of one process.
#[derive(Debug)]
pub struct Registry {
    root: prometheus_client::registry::Registry,
    /// What is read at scrape time. Weak: what a component reads out often holds the
    /// families it counts into, which this registry holds.
    gauges: Arc<Mutex<Vec<Weak<dyn Gauges>>>>,
}

impl Default for Registry {
    fn default() -> Self {
        let mut root = prometheus_client::registry::Registry::with_prefix(PREFIX);
        let gauges = Arc::new(Mutex::new(Vec::new()));
        root.register_collector(Box::new(ScrapeTime(gauges.clone())));
        Self { root, gauges }
    }
}

impl Registry {
    /// Where a component registers its families, while the process is built: their names
    /// get the `proxy_operator_` prefix.
    pub fn families(&mut self) -> &mut prometheus_client::registry::Registry {
        &mut self.root
    }

    /// `gauges` are encoded at every scrape, for as long as something else holds them.
    pub fn read_at_scrape<G: Gauges + 'static>(&self, gauges: &Arc<G>) {
        let weak: Weak<G> = Arc::downgrade(gauges);
        lock(&self.gauges).push(weak);
    }

    /// The metrics in the OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail; an encoder error would be a bug in a family,
        // and the scrape then shows what was written before it.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.root);
        text
    }
}

/// A component's gauges, read when scraped: it encodes its own families ([`gauge`] writes a
/// single value, [`gauges`] a family of counts).
pub trait Gauges: Send + Sync + std::fmt::Debug {
    /// Encodes this component's gauges now.
    fn encode(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error>;
}

/// The [`Gauges`] read at scrape time.
#[derive(Debug)]
struct ScrapeTime(Arc<Mutex<Vec<Weak<dyn Gauges>>>>);

impl Collector for ScrapeTime {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let gauges: Vec<_> = lock(&self.0).iter().filter_map(Weak::upgrade).collect();
        for gauges in gauges {
            gauges.encode(&mut encoder)?;
        }
        Ok(())
    }
}

/// Encodes one gauge without labels, `proxy_operator_<name>`: a count, or seconds.
pub fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: impl Into<GaugeValue>,
) -> Result<(), std::fmt::Error> {
    match value.into() {
        GaugeValue::Count(count) => {
            let gauge = ConstGauge::new(i64::try_from(count).unwrap_or(i64::MAX));
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)
        }
        GaugeValue::Seconds(seconds) => {
            let gauge = ConstGauge::new(seconds);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)
        }
    }
}

/// Encodes one family of counts, `proxy_operator_<name>`, a series per label set.
pub fn gauges<L: EncodeLabelSet>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (L, usize)>,
) -> Result<(), std::fmt::Error> {
    let mut family =
        encoder.encode_descriptor(name, help, None, ConstGauge::new(0i64).metric_type())?;
    for (labels, count) in series {
        let gauge = ConstGauge::new(i64::try_from(count).unwrap_or(i64::MAX));
        gauge.encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// What [`gauge`] encodes.
#[derive(Clone, Copy, Debug)]
pub enum GaugeValue {
    /// A count of things.
    Count(usize),
    /// A duration, in seconds.
    Seconds(f64),
}

impl From<usize> for GaugeValue {
    fn from(count: usize) -> Self {
        Self::Count(count)
    }
}

impl From<std::time::Duration> for GaugeValue {
    fn from(duration: std::time::Duration) -> Self {
        Self::Seconds(duration.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::metrics::counter::Counter;

    use super::*;

    #[derive(Debug)]
    struct Two;

    impl Gauges for Two {
        fn encode(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
            gauge(encoder, "things", "Things now", 2usize)
        }
    }

    #[test]
    fn families_are_prefixed_and_gauges_are_read_while_held() {
        let mut registry = Registry::default();
        let counter = Counter::<u64>::default();
        registry
            .families()
            .register("calls", "Calls", counter.clone());
        counter.inc();
        let two = Arc::new(Two);
        registry.read_at_scrape(&two);
        let text = registry.encode();
        assert!(text.contains("proxy_operator_calls_total 1"), "{text}");
        assert!(text.contains("proxy_operator_things 2"), "{text}");
        drop(two);
        assert!(!registry.encode().contains("proxy_operator_things"));
    }
}
