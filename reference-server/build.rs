//! Records the git commit and the compiler for `GET /version` (`unknown` outside a git checkout).

use std::process::Command;

fn output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
}

fn main() {
    let commit =
        output("git", &["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=REFERENCE_SERVER_GIT_COMMIT={commit}");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    if let Some(v) = output(&rustc, &["--version"]) {
        println!("cargo:rustc-env=REFERENCE_SERVER_RUSTC={v}");
    }
    // Re-run when the checked-out commit moves: HEAD, and the branch file it points to, or the packed refs.
    // Only files that exist are watched: cargo re-runs a script whose watched file is missing on every
    // build, and so recompiles the server each time.
    let watch = |path: String| {
        if std::path::Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    };
    watch("../.git/HEAD".into());
    watch("../.git/packed-refs".into());
    if let Ok(head) = std::fs::read_to_string("../.git/HEAD")
        && let Some(reference) = head.trim().strip_prefix("ref: ")
    {
        watch(format!("../.git/{reference}"));
    }
    // Outside a git checkout, watch this script alone (without any line cargo would re-run it on every
    // change of the package).
    println!("cargo:rerun-if-changed=build.rs");
}
