//! The files that hold card data or the key to it are their owner's alone: the data
//! directory is created 0700 and sled's files 0600, and a server whose data directory or
//! master key file others may read refuses to start, saying how to fix it.

use crate::common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn the_store_is_private_and_a_shared_one_stops_the_start() {
    let mut server = Server::start();
    let t = server.token("user_1", "private");
    server.add_card(&t, "user_1", VISA);
    let data = server.dir.path().join("data");
    assert_eq!(mode(&data), 0o700);
    let mut files = 0;
    let mut dirs = vec![data.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                assert_eq!(mode(&path) & 0o077, 0, "{}", path.display());
                dirs.push(path);
            } else {
                assert_eq!(mode(&path) & 0o077, 0, "{}", path.display());
                files += 1;
            }
        }
    }
    assert!(files > 0, "sled wrote no file");
    server.stop(false);

    set_mode(&data, 0o755);
    let said = refused_start(&server.config_path);
    assert!(
        said.contains("data_dir") && said.contains("chmod -R go-rwx") && said.contains("755"),
        "{said}"
    );
    set_mode(&data, 0o700);

    let key = server.dir.path().join("master.key");
    set_mode(&key, 0o644);
    let said = refused_start(&server.config_path);
    assert!(
        said.contains("master_key_file") && said.contains("chmod -R go-rwx"),
        "{said}"
    );
    set_mode(&key, 0o600);
    server.restart();
    assert_eq!(server.call("GET", "/ready", None, None).status, 200);
}
