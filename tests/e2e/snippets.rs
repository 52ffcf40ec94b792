//! The buyer snippets of the docs run as printed: `docs/paying.md` prints `docs/buyers/buy.mjs`, `buy.py` and
//! x402-tower's reqwest example as they are, the two files buy an article from a running server with the
//! official clients (and say what is missing without a key), and the README's one paid request buys one with
//! the command it prints.

use std::path::{Path, PathBuf};

use workspace_tests::clients::output as run;
use workspace_tests::tools;

use crate::common::RefServer;

/// The workspace's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The fenced code blocks of `markdown` in `lang`, each as its text.
fn blocks(markdown: &str, lang: &str) -> Vec<String> {
    let open = format!("```{lang}\n");
    let mut out = Vec::new();
    let mut rest = markdown;
    while let Some(start) = rest.find(&open) {
        let body = &rest[start + open.len()..];
        let end = body.find("```\n").expect("a closed block");
        out.push(body[..end].to_owned());
        rest = &body[end..];
    }
    out
}

/// The anvil account #0 key the docs print (public; verify-only settlement moves nothing).
const KEY: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

/// What the README and the docs buy.
const ARTICLE_PATH: &str = "/x402Article?articleId=c2pa-explained";

#[test]
fn the_docs_print_the_snippets_as_they_are() {
    let paying = read("docs/paying.md");
    assert_eq!(blocks(&paying, "js"), [read("docs/buyers/buy.mjs")]);
    assert_eq!(blocks(&paying, "python"), [read("docs/buyers/buy.py")]);
    // The Rust snippet is x402-tower's compiled doc example, its hidden lines left out.
    let source = read("x402-tower/src/client/reqwest.rs");
    let doc: Vec<&str> = source
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .collect();
    let start = doc.iter().position(|l| *l == "```no_run").unwrap() + 1;
    let end = start + doc[start..].iter().position(|l| *l == "```").unwrap();
    let visible: String = doc[start..end]
        .iter()
        .filter(|l| !(l.starts_with("# ") || **l == "#"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(blocks(&paying, "rust"), [visible]);
    for block in blocks(&paying, "sh").iter().take(2) {
        assert!(block.contains(&format!("PAYER_KEY={KEY}")), "{block}");
    }
}

#[tokio::test]
async fn the_buyer_snippets_buy_an_article_as_printed() {
    let server = RefServer::start(|_| {}).await;
    let url = format!("{}{ARTICLE_PATH}", server.url);
    let bought = |who: &str, (code, stdout, stderr): &(i32, String, String)| {
        assert_eq!(*code, 0, "{who}: {stderr}\n{stdout}");
        assert!(
            stdout.starts_with("C2PA Explained for Working Photographers, by "),
            "{who}: {stdout}"
        );
        assert!(
            stdout.contains(&format!("{}/receipts/", server.url)),
            "{who}: {stdout}"
        );
    };
    let no_key = |who: &str, (code, _, stderr): &(i32, String, String)| {
        assert_eq!(*code, 2, "{who}: {stderr}");
        assert!(stderr.contains("Set PAYER_KEY"), "{who}: {stderr}");
        assert!(
            !stderr.contains("Error"),
            "{who}: a clear message, no stack: {stderr}"
        );
    };

    // JavaScript: the file itself, where the official client is installed (ESM resolves packages from
    // the script's directory).
    let js = tools::js_dir().join(format!(".snippet-buy-{}.mjs", std::process::id()));
    std::fs::copy(root().join("docs/buyers/buy.mjs"), &js).expect("copy buy.mjs");
    let name = js.file_name().unwrap().to_str().unwrap().to_owned();
    let paid = run(
        &tools::node(),
        &[&name, &url],
        &tools::js_dir(),
        &[("PAYER_KEY", KEY)],
    )
    .await;
    let unset = run(&tools::node(), &[&name, &url], &tools::js_dir(), &[]).await;
    let _ = std::fs::remove_file(&js);
    bought("buy.mjs", &paid);
    no_key("buy.mjs", &unset);

    // Python: the file as it is in the docs.
    let py = root().join("docs/buyers/buy.py");
    let py = py.to_str().unwrap();
    let paid = run(
        &tools::python(),
        &[py, &url],
        &root(),
        &[("PAYER_KEY", KEY)],
    )
    .await;
    bought("buy.py", &paid);
    no_key(
        "buy.py",
        &run(&tools::python(), &[py, &url], &root(), &[]).await,
    );

    // The README's one paid request: its command, pointed at this server.
    let readme = read("README.md");
    let section = &readme[readme.find("## One paid request").expect("the section")..];
    let command = blocks(section, "sh")
        .into_iter()
        .next()
        .expect("its command");
    let words: Vec<String> = command
        .replace("\\\n", " ")
        .split_whitespace()
        .map(|w| {
            w.trim_matches('\'')
                .replace("http://127.0.0.1:8080", &server.url)
        })
        .collect();
    let (assignment, rest) = words.split_first().unwrap();
    let (var, value) = assignment.split_once('=').expect("the key's variable");
    assert_eq!(rest[0], "cargo", "{command}");
    let args: Vec<&str> = rest[1..].iter().map(String::as_str).collect();
    assert!(args.contains(&url.as_str()), "{command}");
    let (code, stdout, stderr) =
        run(Path::new(env!("CARGO")), &args, &root(), &[(var, value)]).await;
    assert_eq!(code, 0, "{stderr}\n{stdout}");
    let article: serde_json::Value = serde_json::from_str(&stdout).expect("the article's JSON");
    assert_eq!(
        article["article"]["title"],
        "C2PA Explained for Working Photographers"
    );
    assert!(
        stderr.contains("\"paid\""),
        "what was paid, on stderr: {stderr}"
    );
}
