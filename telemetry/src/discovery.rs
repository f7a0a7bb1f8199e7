//! Prometheus file-based discovery (`file_sd_configs`): with `COLLSCOPE_PROMETHEUS_SD_DIR` set, each telemetry
//! server writes the one target it serves to `DIR/collscope-HOST-PORT.json` when it starts and removes it when it
//! stops, so a Prometheus watching `DIR/*.json` finds every rank of every job without a list of ports. One file
//! per server: no process writes another's, so nothing needs a lock, and a rank that died leaves its file behind,
//! which Prometheus then reports down (`up == 0`), as an alert should see it. The file appears whole (written
//! beside it, then renamed), as file_sd requires of a file it may read at any moment.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A target file this process wrote; dropping it removes the file.
#[derive(Debug)]
pub struct TargetFile {
    path: PathBuf,
}

#[derive(Debug, thiserror::Error)]
#[error(
    "cannot write the Prometheus target file {path} (COLLSCOPE_PROMETHEUS_SD_DIR): {source}; set it to an \
     existing folder this user can write and Prometheus can read, or unset it"
)]
pub struct DiscoveryError {
    path: PathBuf,
    source: std::io::Error,
}

impl TargetFile {
    /// Writes `[{"targets": ["HOST:PORT"], "labels": {...}}]` for the server at `host:port` into `dir`.
    pub fn write(dir: &Path, host: &str, port: u16, labels: &[(&str, String)]) -> Result<TargetFile, DiscoveryError> {
        // The host name goes into a file name: only what is safe there.
        let safe: String =
            host.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '_' }).collect();
        let path = dir.join(format!("collscope-{safe}-{port}.json"));
        let err = |source| DiscoveryError { path: path.clone(), source };
        let labels: serde_json::Map<String, serde_json::Value> =
            labels.iter().map(|(k, v)| (k.to_string(), v.clone().into())).collect();
        let body = serde_json::json!([{ "targets": [format!("{host}:{port}")], "labels": labels }]);
        // Created exclusively under a name Prometheus' `*.json` does not match, made readable, then renamed over
        // the final name (a link planted there is replaced, never followed).
        let mut tmp = tempfile::Builder::new().prefix(".collscope-").suffix(".tmp").tempfile_in(dir).map_err(err)?;
        tmp.as_file().set_permissions(std::fs::Permissions::from_mode(0o644)).map_err(err)?;
        tmp.write_all(body.to_string().as_bytes()).map_err(err)?;
        tmp.as_file().sync_all().map_err(err)?;
        tmp.persist(&path).map_err(|e| err(e.error))?;
        Ok(TargetFile { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TargetFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_holds_one_target_with_its_labels_is_readable_and_goes_with_the_server() {
        let dir = tempfile::tempdir().unwrap();
        let f = TargetFile::write(dir.path(), "node/1", 9471, &[("collscope_rank", "3".into())]).unwrap();
        assert_eq!(f.path(), dir.path().join("collscope-node_1-9471.json"));
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(f.path()).unwrap()).unwrap();
        assert_eq!(v, serde_json::json!([{ "targets": ["node/1:9471"], "labels": { "collscope_rank": "3" } }]));
        assert_eq!(std::fs::metadata(f.path()).unwrap().permissions().mode() & 0o777, 0o644);
        // Nothing else is left in the folder: the temporary file was renamed.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        let path = f.path().to_path_buf();
        drop(f);
        assert!(!path.exists());
    }

    #[test]
    fn a_missing_folder_is_an_error_naming_the_variable_and_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("absent");
        let e = TargetFile::write(&missing, "h", 1, &[]).unwrap_err().to_string();
        assert!(e.contains("COLLSCOPE_PROMETHEUS_SD_DIR") && e.contains(&missing.display().to_string()), "{e}");
    }

    #[test]
    fn a_link_planted_at_the_files_name_is_replaced_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::os::unix::fs::symlink(&victim, dir.path().join("collscope-h-1.json")).unwrap();
        let f = TargetFile::write(dir.path(), "h", 1, &[]).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        assert!(!std::fs::symlink_metadata(f.path()).unwrap().file_type().is_symlink());
    }
}
