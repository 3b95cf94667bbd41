//! Uploads against a real `vikingfs serve` (issue 43, finding 9): a zip bomb is refused at its
//! budget with nothing left behind.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::serve::Served;

/// A zip of one entry, `bomb.bin`: `mib` MiB of zeros, deflated (about a thousand to one).
/// Built from one compressed MiB repeated: each copy was compressed from a fresh state and
/// ends at a full flush, so it refers to nothing before it and the copies join into one valid
/// stream (compressing a GiB here, unoptimised, would take minutes). Sizes and CRC are true.
fn bomb(mib: u32) -> Vec<u8> {
    let zeros = vec![0u8; 1 << 20];
    let mut c = flate2::Compress::new(flate2::Compression::best(), false);
    let mut one = Vec::with_capacity(64 << 10);
    c.compress_vec(&zeros, &mut one, flate2::FlushCompress::Full)
        .unwrap();
    assert_eq!(c.total_in(), 1 << 20, "compressed whole");
    let mut stream = Vec::with_capacity(one.len() * mib as usize + 2);
    let mut crc = flate2::Crc::new();
    let mut crc_one = flate2::Crc::new();
    crc_one.update(&zeros);
    for _ in 0..mib {
        stream.extend_from_slice(&one);
        crc.combine(&crc_one);
    }
    // The final block: empty, fixed Huffman codes.
    stream.extend_from_slice(&[0x03, 0x00]);
    let (name, size) = (b"bomb.bin", (mib as u64) << 20);
    let size = u32::try_from(size).expect("under 4 GiB");
    let header = |central: bool| {
        let mut h = Vec::new();
        if central {
            h.extend_from_slice(b"PK\x01\x02\x14\x03");
        } else {
            h.extend_from_slice(b"PK\x03\x04");
        }
        // Version 2.0, no flags, deflate, no time.
        h.extend_from_slice(&[20, 0, 0, 0, 8, 0, 0, 0, 0, 0]);
        h.extend_from_slice(&crc.sum().to_le_bytes());
        h.extend_from_slice(&(stream.len() as u32).to_le_bytes());
        h.extend_from_slice(&size.to_le_bytes());
        h.extend_from_slice(&(name.len() as u16).to_le_bytes());
        h.extend_from_slice(&0u16.to_le_bytes());
        if central {
            // Comment, disk, internal attributes; a regular file 0644; at offset 0.
            h.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
            h.extend_from_slice(&(0o100644u32 << 16).to_le_bytes());
            h.extend_from_slice(&0u32.to_le_bytes());
        }
        h.extend_from_slice(name);
        h
    };
    let mut z = header(false);
    z.extend_from_slice(&stream);
    let cd_off = z.len() as u32;
    let cd = header(true);
    z.extend_from_slice(&cd);
    z.extend_from_slice(b"PK\x05\x06\0\0\0\0\x01\0\x01\0");
    z.extend_from_slice(&(cd.len() as u32).to_le_bytes());
    z.extend_from_slice(&cd_off.to_le_bytes());
    z.extend_from_slice(&0u16.to_le_bytes());
    z
}

/// `POST /api/v1/resources/temp_upload` of `bytes` as the multipart field `file`.
fn upload(s: &Served, name: &str, bytes: &[u8]) -> String {
    let boundary = "vikingfs-test-boundary";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n\
         Content-Type: application/octet-stream\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(bytes);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let ct = format!("Content-Type: multipart/form-data; boundary={boundary}");
    let (code, v) = s.call("POST", "/api/v1/resources/temp_upload", &[&ct], Some(&body));
    assert_eq!(code, 200, "{v}");
    v["result"]["temp_file_id"].as_str().unwrap().to_string()
}

/// Bytes allocated under `dir`, and the regular files there.
fn du(dir: &Path) -> (u64, Vec<String>) {
    use std::os::unix::fs::MetadataExt;
    let (mut n, mut files) = (0, Vec::new());
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(m) = std::fs::symlink_metadata(e.path()) else {
            continue;
        };
        n += m.blocks() * 512;
        if m.is_dir() {
            let (k, f) = du(&e.path());
            n += k;
            files.extend(f);
        } else {
            files.push(e.path().display().to_string());
        }
    }
    (n, files)
}

#[test]
fn a_zip_bomb_is_refused_at_its_budget_and_leaves_nothing_behind() {
    const BUDGET: u64 = 32 << 20;
    let tmp = tempfile::tempdir().unwrap();
    let s = Served::with_config_env(
        json!({ "server": { "max_unpacked_bytes": BUDGET } }),
        &[("TMPDIR", tmp.path())],
    );
    // A GiB of zeros in a zip of about a MiB.
    let z = bomb(1024);
    assert!(z.len() < 2 << 20, "{}", z.len());
    let id = upload(&s, "bomb.zip", &z);
    // What TMPDIR holds, looked at every 5 ms while the add runs.
    let done = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(0));
    let watcher = {
        let (done, peak, dir) = (done.clone(), peak.clone(), tmp.path().to_path_buf());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(du(&dir).0, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let started = Instant::now();
    let (code, v) = s.json(
        "POST",
        "/api/v1/resources",
        &[],
        &json!({"temp_file_id": id, "to": "viking://resources/bomb"}),
    );
    let took = started.elapsed();
    done.store(true, Ordering::Relaxed);
    watcher.join().unwrap();
    let peak = peak.load(Ordering::Relaxed);
    eprintln!(
        "bomb refused in {took:?}; TMPDIR held at most {} KiB",
        peak >> 10
    );
    assert_eq!(code, 413, "{v}");
    assert_eq!(v["status"], "error", "{v}");
    let msg = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("Upload exceeds size limit") && msg.contains(&BUDGET.to_string()),
        "{v}"
    );
    assert_eq!(v["error"]["details"]["max_unpacked_bytes"], BUDGET, "{v}");
    // The budget, the zip itself, and a few MiB of slack for the filesystem's own blocks.
    assert!(
        peak <= BUDGET + z.len() as u64 + (4 << 20),
        "TMPDIR held {peak} bytes against a budget of {BUDGET}"
    );
    let (left, files) = du(tmp.path());
    assert!(files.is_empty(), "left in TMPDIR: {files:?} ({left} bytes)");
    assert!(!s.ws.join("viking/default/resources/bomb").exists());
    // The upload is spent: a second add finds nothing.
    let (code, v) = s.json(
        "POST",
        "/api/v1/resources",
        &[],
        &json!({"temp_file_id": id, "to": "viking://resources/bomb"}),
    );
    assert_eq!(code, 404, "{v}");
    // Within the budget, an archive is unpacked as before.
    let id = upload(&s, "small.zip", &bomb(8));
    let (code, v) = s.json(
        "POST",
        "/api/v1/resources",
        &[],
        &json!({"temp_file_id": id, "to": "viking://resources/small"}),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["result"]["meta"]["file_count"], 1, "{v}");
}
