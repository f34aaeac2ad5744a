//! Counts given as a number or a percentage (`maxSurge: "25%"`), resolved against a total.

use proxy_crd::IntOrPercent;

/// Which way a percentage of a total rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Round {
    /// Up: `maxSurge`, the disruption budget, the circuit breaker's share (a share of a small
    /// pool is at least one proxy, as Deployments round `maxSurge`).
    Up,
    /// Down: `maxUnavailable` (a share of a small pool may be none, as Deployments round it).
    Down,
}

/// `amount` of `total`: the count itself (a number, or its digits as a string), or the
/// percentage of `total` rounded as `round` says. What the API server would refuse (it
/// checks the pattern) counts as 0, and so does a negative count: the safe reading for
/// every use here.
pub fn resolve(amount: &IntOrPercent, total: u32, round: Round) -> u32 {
    match amount {
        IntOrPercent::Int(count) => u32::try_from(*count).unwrap_or(0),
        IntOrPercent::Percent(text) => {
            let Some(digits) = text.strip_suffix('%') else {
                // A count written as a string, `"2"`: the API server accepts it.
                return text.parse().unwrap_or(0);
            };
            let percent: u64 = digits.parse().unwrap_or(0);
            let scaled = u64::from(total) * percent;
            let share = match round {
                Round::Up => scaled.div_ceil(100),
                Round::Down => scaled / 100,
            };
            u32::try_from(share).unwrap_or(u32::MAX)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn percent(text: &str) -> IntOrPercent {
        IntOrPercent::Percent(text.into())
    }

    #[test]
    fn counts_and_percentages_resolve_rounded_as_asked() {
        let table = [
            (IntOrPercent::Int(2), 10, Round::Up, 2),
            (IntOrPercent::Int(2), 0, Round::Down, 2),
            (IntOrPercent::Int(-1), 10, Round::Up, 0),
            (percent("25%"), 10, Round::Up, 3),
            (percent("25%"), 10, Round::Down, 2),
            (percent("25%"), 3, Round::Up, 1),
            (percent("25%"), 3, Round::Down, 0),
            (percent("100%"), 7, Round::Down, 7),
            (percent("0%"), 7, Round::Up, 0),
            (percent("20%"), 0, Round::Up, 0),
            (percent("abc%"), 10, Round::Up, 0),
            (percent("25"), 10, Round::Up, 25),
            (percent("-3"), 10, Round::Up, 0),
        ];
        for (amount, total, round, want) in table {
            assert_eq!(
                resolve(&amount, total, round),
                want,
                "{amount:?} of {total} {round:?}"
            );
        }
    }
}
