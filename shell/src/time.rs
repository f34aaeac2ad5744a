//! The one bridge between the two jiff versions in the build.
//!
//! The operator and its core use jiff 1; k8s-openapi's `Time` and `MicroTime` wrap a jiff
//! 0.2 `Timestamp` (`k8s_openapi::jiff`). The two types are unrelated to the compiler, so
//! every timestamp read from or written to a Kubernetes object crosses here, as the whole
//! seconds and nanoseconds since the Unix epoch: exact, and without formatting and parsing
//! text.
//!
//! Both versions cover the same range (years -9999 to 9999), so a conversion never fails in
//! practice; should a future version narrow one side, a time out of range reads as `None`
//! rather than panicking.

use jiff::Timestamp;
use k8s_openapi::jiff::Timestamp as KubeTimestamp;

/// A timestamp of a Kubernetes object (`Time.0`, `MicroTime.0`) as ours.
pub fn from_kube(at: KubeTimestamp) -> Option<Timestamp> {
    Timestamp::new(at.as_second(), at.subsec_nanosecond()).ok()
}

/// Our timestamp as one for a Kubernetes object (`Time(..)`, `MicroTime(..)`).
pub fn to_kube(at: Timestamp) -> Option<KubeTimestamp> {
    KubeTimestamp::new(at.as_second(), at.subsec_nanosecond()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timestamp_crosses_both_ways_unchanged() {
        for text in [
            "2026-11-30T12:00:00.123456789Z",
            "1970-01-01T00:00:00Z",
            "1969-12-31T23:59:59.000000001Z",
            "0001-01-01T00:00:00Z",
            "-009999-01-02T01:59:59Z",
            "9999-12-30T22:00:00.999999999Z",
        ] {
            let ours: Timestamp = text.parse().unwrap();
            let kube: KubeTimestamp = text.parse().unwrap();
            assert_eq!(to_kube(ours), Some(kube), "{text}");
            assert_eq!(from_kube(kube), Some(ours), "{text}");
        }
    }

    #[test]
    fn the_ranges_are_the_same() {
        assert_eq!(from_kube(KubeTimestamp::MIN), Some(Timestamp::MIN));
        assert_eq!(from_kube(KubeTimestamp::MAX), Some(Timestamp::MAX));
        assert_eq!(to_kube(Timestamp::MIN), Some(KubeTimestamp::MIN));
        assert_eq!(to_kube(Timestamp::MAX), Some(KubeTimestamp::MAX));
    }
}
