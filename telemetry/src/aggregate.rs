//! Merging the Prometheus expositions of several processes (the local ranks of one node) into one, so a
//! single scrape of local rank 0 sees the whole node. Series stay apart by their `rank` label; each family's
//! `# HELP` and `# TYPE` appear once, as the text format requires.

/// One family: its help and type lines and every sample line from every input.
struct Family {
    name: String,
    help: Option<String>,
    kind: Option<String>,
    samples: Vec<String>,
}

/// The family a sample line belongs to: its metric name less a histogram or summary suffix when the
/// family is declared without it.
fn family_of<'a>(sample: &'a str, families: &[Family]) -> &'a str {
    let name = sample.split(['{', ' ']).next().unwrap_or(sample);
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix) {
            if families.iter().any(|f| f.name == base) {
                return base;
            }
        }
    }
    name
}

/// Merges text-format expositions, keeping the order in which families first appear.
pub fn merge_expositions(texts: &[String]) -> String {
    let mut families: Vec<Family> = Vec::new();
    let find = |families: &mut Vec<Family>, name: &str| -> usize {
        match families.iter().position(|f| f.name == name) {
            Some(i) => i,
            None => {
                families.push(Family { name: name.to_string(), help: None, kind: None, samples: Vec::new() });
                families.len() - 1
            }
        }
    };
    for text in texts {
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap_or(rest);
                let i = find(&mut families, name);
                families[i].help.get_or_insert_with(|| line.to_string());
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let name = rest.split(' ').next().unwrap_or(rest);
                let i = find(&mut families, name);
                families[i].kind.get_or_insert_with(|| line.to_string());
            } else if line.starts_with('#') {
                continue;
            } else {
                let name = family_of(line, &families).to_string();
                let i = find(&mut families, &name);
                families[i].samples.push(line.to_string());
            }
        }
    }
    let mut out = String::new();
    for f in families {
        for line in f.help.iter().chain(f.kind.iter()).chain(f.samples.iter()) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_from_several_ranks_merge_with_one_header_each() {
        let a = "# HELP x_total X.\n# TYPE x_total counter\nx_total{rank=\"0\"} 1\n\
                 # HELP h_seconds H.\n# TYPE h_seconds histogram\nh_seconds_bucket{rank=\"0\",le=\"+Inf\"} 2\n\
                 h_seconds_sum{rank=\"0\"} 0.5\nh_seconds_count{rank=\"0\"} 2\n"
            .to_string();
        let b = "# HELP h_seconds H.\n# TYPE h_seconds histogram\nh_seconds_bucket{rank=\"1\",le=\"+Inf\"} 3\n\
                 h_seconds_sum{rank=\"1\"} 1\nh_seconds_count{rank=\"1\"} 3\n\
                 # HELP x_total X.\n# TYPE x_total counter\nx_total{rank=\"1\"} 4\n"
            .to_string();
        let merged = merge_expositions(&[a, b]);
        assert_eq!(merged.matches("# TYPE x_total counter").count(), 1);
        assert_eq!(merged.matches("# TYPE h_seconds histogram").count(), 1);
        let lines: Vec<_> = merged.lines().collect();
        let x = lines.iter().position(|l| *l == "# TYPE x_total counter").unwrap();
        assert_eq!(&lines[x + 1..x + 3], ["x_total{rank=\"0\"} 1", "x_total{rank=\"1\"} 4"]);
        let h = lines.iter().position(|l| *l == "# TYPE h_seconds histogram").unwrap();
        assert_eq!(lines[h + 1..].iter().filter(|l| l.starts_with("h_seconds")).count(), 6);
    }
}
