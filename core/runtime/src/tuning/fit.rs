//! Fitting the profile's constants from timings: a straight line `t = a + b * bytes` per cell, by least
//! squares weighted by 1/t^2 (relative error), so the small sizes that carry the latency count as much as the
//! large ones that carry the bandwidth.

use super::predict::{bus_factor, steps};
use super::profile::CellCost;
use collscope_model::{Algorithm, Collective, Protocol};

/// `t_us = intercept + slope * bytes`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LineFit {
    pub intercept: f64,
    pub slope: f64,
}

/// Fits `points` (bytes, microseconds); None with fewer than two distinct sizes or a non-positive time.
pub fn fit_line(points: &[(f64, f64)]) -> Option<LineFit> {
    if points.iter().any(|&(x, y)| !(x.is_finite() && y.is_finite() && y > 0.0)) {
        return None;
    }
    let (mut sw, mut sx, mut sy, mut sxx, mut sxy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(x, y) in points {
        let w = 1.0 / (y * y);
        sw += w;
        sx += w * x;
        sy += w * y;
        sxx += w * x * x;
        sxy += w * x * y;
    }
    let det = sw * sxx - sx * sx;
    if det.abs() <= f64::EPSILON * sw * sxx {
        return None;
    }
    let slope = (sw * sxy - sx * sy) / det;
    let intercept = (sy - slope * sx) / sw;
    Some(LineFit { intercept, slope })
}

/// Slowest bandwidth a fit may imply (a non-positive slope means the noise hid the bandwidth term), GB/s.
const MAX_FITTED_BW: f64 = 1000.0;

/// A cell's constants from AllReduce fits on `nranks` ranks with one channel and with `max_channels`:
/// latency per step from the one-channel intercept, one channel's bus bandwidth from its slope, the
/// bandwidth of all channels together from the other slope, and the latency each extra channel adds.
pub fn cell_from_fits(
    algo: Algorithm,
    proto: Protocol,
    nranks: u32,
    one: LineFit,
    all: LineFit,
    max_channels: u32,
) -> CellCost {
    let coll = Collective::AllReduce;
    let (steps, factor) = (steps(coll, algo, nranks), bus_factor(coll, algo, nranks));
    // bytes * factor / (bw * 1e3) us = slope * bytes.
    let bw = |slope: f64| if slope > 0.0 { (factor / (slope * 1e3)).min(MAX_FITTED_BW) } else { MAX_FITTED_BW };
    let extra = max_channels.saturating_sub(1).max(1) as f64;
    CellCost {
        algo,
        proto,
        lat_us: (one.intercept / steps).max(0.0),
        bw_gbps: bw(one.slope),
        max_bw_gbps: bw(all.slope),
        channel_lat_us: if max_channels > 1 { ((all.intercept - one.intercept) / extra).max(0.0) } else { 0.0 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovers_known_constants_from_synthetic_timings() {
        // A 4-rank ring AllReduce: 6 steps of 5 us, one channel at 2 GB/s bus, two at 3 GB/s, +4 us per channel.
        let (lat, bw1, bw2, chlat) = (5.0, 2.0, 3.0, 4.0);
        let factor = 1.5;
        let sizes = [1024.0, 8192.0, 65536.0, 524288.0, 4194304.0];
        let time = |b: f64, lat0: f64, bw: f64| lat0 + b * factor / (bw * 1e3);
        // 1 % multiplicative noise, alternating in sign.
        let noisy = |i: usize, t: f64| t * if i.is_multiple_of(2) { 1.01 } else { 0.99 };
        let one: Vec<_> = sizes.iter().enumerate().map(|(i, &b)| (b, noisy(i, time(b, 6.0 * lat, bw1)))).collect();
        let all: Vec<_> =
            sizes.iter().enumerate().map(|(i, &b)| (b, noisy(i + 1, time(b, 6.0 * lat + chlat, bw2)))).collect();
        let (f1, f2) = (fit_line(&one).unwrap(), fit_line(&all).unwrap());
        let c = cell_from_fits(Algorithm::Ring, Protocol::Simple, 4, f1, f2, 2);
        let close = |got: f64, want: f64| (got - want).abs() / want < 0.05;
        assert!(close(c.lat_us, lat), "{c:?}");
        assert!(close(c.bw_gbps, bw1), "{c:?}");
        assert!(close(c.max_bw_gbps, bw2), "{c:?}");
        assert!((c.channel_lat_us - chlat).abs() < 1.0, "{c:?}");
        // Exact data gives exact constants.
        let exact: Vec<_> = sizes.iter().map(|&b| (b, time(b, 30.0, 2.0))).collect();
        let f = fit_line(&exact).unwrap();
        assert!((f.intercept - 30.0).abs() < 1e-6 && (f.slope - 1.5 / 2e3).abs() < 1e-12, "{f:?}");
    }

    #[test]
    fn degenerate_timings_do_not_fit() {
        assert_eq!(fit_line(&[(1024.0, 5.0)]), None);
        assert_eq!(fit_line(&[(1024.0, 5.0), (1024.0, 6.0)]), None);
        assert_eq!(fit_line(&[(1024.0, 5.0), (2048.0, 0.0)]), None);
        assert_eq!(fit_line(&[(1024.0, f64::NAN), (2048.0, 1.0)]), None);
        // Noise that makes the large size faster gives no bandwidth limit rather than a negative one.
        let f = fit_line(&[(1024.0, 10.0), (4096.0, 9.0)]).unwrap();
        let c = cell_from_fits(Algorithm::Ring, Protocol::Ll, 2, f, f, 1);
        assert_eq!((c.bw_gbps, c.channel_lat_us), (MAX_FITTED_BW, 0.0));
    }
}
