//! The gateway's open-files limit. Each client connection holds two file descriptors (the
//! client's socket and its upstream's), so the limit bounds the connections a gateway can
//! hold: a container starts with the limit its runtime gives it, and containerd 2 (so Docker
//! 29 and most Kubernetes nodes from 2025 on) gives 1024 soft and 524 288 hard, about 500
//! connections. As containerd asks of a program that needs more, the gateway raises its soft
//! limit to the hard one at start, as Go programs do by themselves.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// The highest soft limit asked for when the hard one is unlimited: the kernel refuses more
/// than `fs.nr_open`, whose default this is.
const UNLIMITED: u64 = 1 << 20;

/// Raises the soft open-files limit to the hard one; the soft limit then, and the error if
/// raising it failed (the limit stays as it was).
pub fn raise() -> (u64, Option<std::io::Error>) {
    let limit = getrlimit(Resource::Nofile);
    let failed = raised(&limit).and_then(|raised| {
        setrlimit(Resource::Nofile, raised)
            .err()
            .map(std::io::Error::from)
    });
    let soft = getrlimit(Resource::Nofile).current.unwrap_or(UNLIMITED);
    (soft, failed)
}

/// The limit to set instead of `limit`, if it is to change: the soft one as high as the hard
/// one allows (`None` is unlimited).
fn raised(limit: &Rlimit) -> Option<Rlimit> {
    let soft = limit.current?;
    let hard = limit.maximum.unwrap_or(UNLIMITED);
    (soft < hard).then_some(Rlimit {
        current: Some(hard),
        maximum: limit.maximum,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_goes_up_to_the_hard_one_and_never_down() {
        let limit = |current, maximum| Rlimit { current, maximum };
        for (now, to) in [
            (limit(Some(1024), Some(524_288)), Some(Some(524_288))),
            (limit(Some(1024), None), Some(Some(UNLIMITED))),
            (limit(Some(20_000), Some(20_000)), None),
            (limit(Some(2 << 20), None), None),
            (limit(None, None), None),
        ] {
            let raised = raised(&now);
            assert_eq!(raised.as_ref().map(|r| r.current), to, "{now:?}");
            if let Some(raised) = raised {
                assert_eq!(raised.maximum, now.maximum, "the hard limit is kept");
            }
        }
    }
}
