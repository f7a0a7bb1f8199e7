//! nccl-tests' number formats (`src/util.cu`): `getFloatStr` for the table columns and C's `%g`.

/// `getFloatStr(value, width)`: two, one or no decimals, or exponent form, whichever fits `width`.
pub(super) fn float_str(value: f64, width: usize) -> String {
    let mut power = 0usize;
    let mut val: u64 = 1;
    while value >= val as f64 && power < 30 {
        power += 1;
        val = val.saturating_mul(10);
    }
    if power + 2 < width {
        format!("{value:>width$.2}")
    } else if power + 1 < width {
        format!("{value:>width$.1}")
    } else if power < width + 1 {
        format!("{value:>width$.0}")
    } else {
        format!("{:>width$}", c_exp(value, if width >= 7 { 1 } else { 0 }))
    }
}

/// C's `%.{prec}e`: mantissa, `e`, sign, at least two exponent digits.
fn c_exp(value: f64, prec: usize) -> String {
    let s = format!("{value:.prec$e}");
    let (mant, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let e: i32 = exp.parse().unwrap_or(0);
    format!("{mant}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
}

/// C's `%g` (six significant digits, trailing zeros removed).
pub(super) fn c_g(value: f64) -> String {
    if value == 0.0 {
        return "0".into();
    }
    if !value.is_finite() {
        return if value.is_nan() {
            "nan".into()
        } else if value > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        };
    }
    const P: i32 = 6;
    // The exponent after rounding to P significant digits decides the style.
    let sci = format!("{:.*e}", (P - 1) as usize, value);
    let exp: i32 = sci.split_once('e').and_then(|(_, e)| e.parse().ok()).unwrap_or(0);
    if !(-4..P).contains(&exp) {
        let (mant, _) = sci.split_once('e').unwrap_or((&sci, ""));
        format!("{}e{}{:02}", strip_zeros(mant), if exp < 0 { '-' } else { '+' }, exp.abs())
    } else {
        strip_zeros(&format!("{:.*}", (P - 1 - exp) as usize, value)).to_string()
    }
}

fn strip_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_str_matches_get_float_str() {
        assert_eq!(float_str(12.345, 7), "  12.35");
        assert_eq!(float_str(0.0, 6), "  0.00");
        assert_eq!(float_str(1234.5, 6), "1234.5");
        assert_eq!(float_str(12345.4, 6), " 12345");
        assert_eq!(float_str(123456.0, 6), "123456");
        assert_eq!(float_str(1234567.0, 6), " 1e+06");
        assert_eq!(float_str(12345678.0, 7), "1.2e+07");
        assert_eq!(float_str(99999.0, 7), "99999.0");
    }

    #[test]
    fn g_matches_c() {
        assert_eq!(c_g(2.80613), "2.80613");
        assert_eq!(c_g(0.0), "0");
        assert_eq!(c_g(1.5), "1.5");
        assert_eq!(c_g(123456.7), "123457");
        assert_eq!(c_g(1234567.0), "1.23457e+06");
        assert_eq!(c_g(0.0001234), "0.0001234");
        assert_eq!(c_g(0.00001234), "1.234e-05");
        assert_eq!(c_g(12.0), "12");
    }
}
