//! Interface B tests: the registry router served on a free loopback port, driven over real HTTP.
//!
//! The server here is the registry alone (`registry::router` + `registry::seed`) so each test controls
//! the registry configuration (token, upload cap, signing key); the whole-server tests in the other
//! modules exercise the same router mounted by the chassis.

use std::collections::HashSet;
use std::time::Duration;

use reference_server::registry::signing::UrlSigner;
use reference_server::registry::{self, RegistryConfig, cid_v1_raw};
use reference_server::store::Stores;
use reference_server::web::clock::unix_now;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// A directory removed on drop.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("registry-it-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const TOKEN: &str = "test-token-0123456789";
const KEY: &[u8] = b"registry-test-signing-key-0123456789";
const UPLOAD_CAP: usize = 64 * 1024;

struct Registry {
    base: String,
    client: reqwest::Client,
    _dir: TempDir,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Registry {
    async fn start(n_assets: usize, token: Option<&str>) -> Self {
        let dir = TempDir::new();
        let url = super::common::fresh_database(dir.path(), "db.sqlite3").await;
        let media = dir.path().join("media");
        Self::start_on(&url, &media, dir, n_assets, token).await
    }

    /// An instance on the database at `url`, storing files in `media` (instances may share both).
    async fn start_on(
        url: &str,
        media: &std::path::Path,
        dir: TempDir,
        n_assets: usize,
        token: Option<&str>,
    ) -> Self {
        let stores = Stores::open(&url.parse().unwrap()).await.unwrap();
        let db = stores.assets;
        registry::seed(&*db, n_assets).await.unwrap();
        assert_eq!(db.count().await.unwrap(), n_assets as u64);
        assert_eq!(
            registry::seed(&*db, n_assets).await.unwrap(),
            0,
            "seeding a non-empty registry is a no-op"
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let mut cfg = RegistryConfig::new(base.clone(), media.to_path_buf());
        cfg.api_token = token.map(str::to_owned);
        cfg.url_signing_key = KEY.to_vec();
        cfg.max_upload_bytes = UPLOAD_CAP;
        let app = registry::router(db, cfg, None);
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            base,
            client: super::common::test_client(),
            _dir: dir,
            task,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn get_json(&self, url: &str) -> Value {
        let r = self.client.get(url).send().await.unwrap();
        assert_eq!(r.status(), 200, "{url}");
        r.json().await.unwrap()
    }

    async fn all_records(&self) -> Vec<Value> {
        let mut out = Vec::new();
        let mut next = Some(self.url("/api/v3/assets/"));
        while let Some(url) = next {
            let page = self.get_json(&url).await;
            out.extend(page["results"].as_array().unwrap().iter().cloned());
            next = page["next"].as_str().map(str::to_owned);
        }
        out
    }
}

fn assert_drf_headers(r: &reqwest::Response) {
    assert_eq!(
        r.headers()["allow"],
        "GET, POST, HEAD, OPTIONS",
        "{}",
        r.url()
    );
    // Listing pages (GET, HEAD) may be compressed: they also vary on Accept-Encoding.
    let vary = r.headers()["vary"].to_str().unwrap();
    assert!(
        vary == "Accept" || vary == "Accept, Accept-Encoding",
        "{vary} {}",
        r.url()
    );
}

#[tokio::test]
async fn walk_from_offset_zero_sees_every_asset_once_newest_first() {
    let reg = Registry::start(450, None).await;
    let mut next = Some(reg.url("/api/v3/assets/"));
    let (mut ids, mut pages, mut last_uploaded) = (Vec::new(), 0, String::from("9999"));
    let mut expected_previous: Option<String> = None;
    while let Some(url) = next {
        let r = reg.client.get(&url).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-type"], "application/json");
        assert_drf_headers(&r);
        let page: Value = r.json().await.unwrap();
        assert_eq!(page["count"], 450);
        assert_eq!(
            page["previous"].as_str().map(str::to_owned),
            expected_previous
        );
        for rec in page["results"].as_array().unwrap() {
            let up = rec["uploaded_at"].as_str().unwrap().to_owned();
            assert!(up <= last_uploaded, "descending uploaded_at");
            last_uploaded = up;
            ids.push(rec["id"].as_str().unwrap().to_owned());
        }
        assert!(page["results"].as_array().unwrap().len() <= 200);
        pages += 1;
        expected_previous = Some(match pages {
            1 => reg.url("/api/v3/assets/?limit=200"),
            n => reg.url(&format!(
                "/api/v3/assets/?limit=200&offset={}",
                (n - 1) * 200
            )),
        });
        next = page["next"].as_str().map(str::to_owned);
        if let Some(n) = &next {
            assert!(n.contains("limit=200"), "{n}");
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(ids.len(), 450);
    assert_eq!(
        ids.iter().collect::<HashSet<_>>().len(),
        450,
        "every asset exactly once"
    );

    // The tie-break is stable: the same page twice is byte-identical apart from nothing.
    let a = reg
        .get_json(&reg.url("/api/v3/assets/?limit=7&offset=100"))
        .await;
    let b = reg
        .get_json(&reg.url("/api/v3/assets/?limit=7&offset=100"))
        .await;
    assert_eq!(a["results"], b["results"]);
    let ids_a: Vec<&str> = a["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids_a,
        ids[100..107].iter().map(String::as_str).collect::<Vec<_>>()
    );
    // Past the end: empty page, previous steps back.
    let past = reg.get_json(&reg.url("/api/v3/assets/?offset=5000")).await;
    assert_eq!(past["results"].as_array().unwrap().len(), 0);
    assert_eq!(past["next"], Value::Null);
    assert_eq!(
        past["previous"].as_str().unwrap(),
        reg.url("/api/v3/assets/?limit=200&offset=4800")
    );
}

#[derive(Clone, Copy, Debug)]
enum Ty {
    Str,
    StrOrNull,
    Int,
    IntOrNull,
    Bool,
    BoolOrNull,
    Null,
    Array,
    Object,
    ObjectOrNull,
    Url,
    UrlOrNull,
    Signed,
    SignedOrNull,
}

/// Every field of the interfaces.md part B tables, with its stated JSON type.
const FIELDS: &[(&str, Ty)] = {
    use Ty::*;
    &[
        ("id", Str),
        ("uuid", Str),
        ("cid", Str),
        ("type", Str),
        ("c2pa", BoolOrNull),
        ("asset_file", Signed),
        ("asset_file_url", Str),
        ("asset_file_name", Str),
        ("asset_file_size", Int),
        ("asset_file_mime_type", Str),
        ("asset_file_snapshot", SignedOrNull),
        ("asset_file_snapshot_url", Str),
        ("asset_file_thumbnail", SignedOrNull),
        ("sharable_copy", SignedOrNull),
        ("image_file", Null),
        ("image_file_url", Str),
        ("image_file_size", Int),
        ("image_file_mime_type", Str),
        ("supporting_file", Str),
        ("supporting_file_mime_type", Str),
        ("supporting_file_thumbnail", Str),
        ("integrity_providers", Array),
        ("integrity_info", Array),
        ("integrity_verification_hash", Str),
        ("integrity_verification_tag", Str),
        ("license", Str),
        ("proof_hash", Str),
        ("nit_commit_custom", Object),
        ("nft_spec", Str),
        ("nft_token_id", StrOrNull),
        ("nft_token_uri", Str),
        ("nft_creation_tx_hash", Str),
        ("nft_creator_address", Str),
        ("nft_chain_id", IntOrNull),
        ("nft_blockchain_name", Str),
        ("nft_contract_address", Str),
        ("caption", Str),
        ("headline", Str),
        ("tag", Str),
        ("information", Object),
        ("signed_metadata", Str),
        ("metadata_cid", StrOrNull),
        ("signature", Array),
        ("signature_provider", Str),
        ("origin_type", Str),
        ("digital_source_type", Str),
        ("service_name", Str),
        ("source_type", Str),
        ("verification_result", Str),
        ("owner", Str),
        ("owner_name", Str),
        ("owner_profile_display_name", Str),
        ("owner_profile_picture", Url),
        ("owner_profile_picture_thumbnail", Url),
        ("owner_addresses", Object),
        ("creator", StrOrNull),
        ("creator_name", StrOrNull),
        ("creator_profile_display_name", StrOrNull),
        ("creator_profile_picture", UrlOrNull),
        ("creator_profile_picture_thumbnail", UrlOrNull),
        ("creator_addresses", Object),
        ("is_original_owner", Bool),
        ("parent_asset", Null),
        ("parent_asset_cid", Str),
        ("source_transaction", ObjectOrNull),
        ("task_id", StrOrNull),
        ("post_creation_workflow_id", Str),
        ("mint_workflow_id", StrOrNull),
        ("search_image_samples_error", Str),
        ("create_image_sample_error", Str),
        ("preexisting", Array),
        ("certified_asset", SignedOrNull),
        ("certified_asset_mime_type", Str),
        ("certified_asset_thumbnail", SignedOrNull),
        ("certificate_qrcode", Signed),
        ("certificate_link", Url),
        ("protected", Bool),
        ("public_access", Bool),
        ("allow_c2pa_download", Bool),
        ("published", Bool),
        ("uploaded_at", Str),
        ("updated_at", Str),
        ("parsed_meta", Object),
    ]
};

fn is_url(v: &Value) -> bool {
    v.as_str()
        .is_some_and(|s| s.starts_with("http://") || s.starts_with("https://"))
}

fn is_signed(v: &Value) -> bool {
    v.as_str().is_some_and(|s| {
        is_url(v)
            && s.contains("?Expires=")
            && s.contains("&Signature=")
            && s.contains("&Key-Pair-Id=")
    })
}

fn type_ok(v: &Value, ty: Ty) -> bool {
    match ty {
        Ty::Str => v.is_string(),
        Ty::StrOrNull => v.is_string() || v.is_null(),
        Ty::Int => v.is_u64() || v.is_i64(),
        Ty::IntOrNull => v.is_u64() || v.is_i64() || v.is_null(),
        Ty::Bool => v.is_boolean(),
        Ty::BoolOrNull => v.is_boolean() || v.is_null(),
        Ty::Null => v.is_null(),
        Ty::Array => v.is_array(),
        Ty::Object => v.is_object(),
        Ty::ObjectOrNull => v.is_object() || v.is_null(),
        Ty::Url => is_url(v),
        Ty::UrlOrNull => is_url(v) || v.is_null(),
        Ty::Signed => is_signed(v),
        Ty::SignedOrNull => is_signed(v) || v.is_null(),
    }
}

fn is_iso_micros(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 27
        && b[4] == b'-'
        && b[10] == b'T'
        && b[19] == b'.'
        && b[26] == b'Z'
        && b[20..26].iter().all(u8::is_ascii_digit)
}

fn is_hex(s: &str, prefixed: bool, len: usize) -> bool {
    let body = if prefixed {
        s.strip_prefix("0x")
    } else {
        Some(s)
    };
    body.is_some_and(|b| b.len() == len && b.bytes().all(|c| c.is_ascii_hexdigit()))
}

/// Nested shapes and value conventions of one record.
fn check_record(r: &Value) {
    let id = r["id"].as_str().unwrap();
    let obj = r.as_object().unwrap();
    for (field, ty) in FIELDS {
        let v = obj
            .get(*field)
            .unwrap_or_else(|| panic!("{id}: field {field} missing"));
        assert!(type_ok(v, *ty), "{id}: field {field} = {v} is not {ty:?}");
    }
    assert_eq!(obj.len(), FIELDS.len(), "{id}: no extra fields");
    assert_eq!(r["id"], r["cid"]);
    assert!(id.starts_with("bafkrei") && id.len() == 59, "{id}");
    assert!(matches!(r["type"].as_str(), Some("unique" | "child")));
    assert!(uuid::Uuid::parse_str(r["uuid"].as_str().unwrap()).is_ok());
    assert!(is_hex(r["proof_hash"].as_str().unwrap(), false, 64));
    let afu = r["asset_file_url"].as_str().unwrap();
    assert!(afu.is_empty() || afu == format!("ipfs://{id}"));
    assert!(is_iso_micros(r["uploaded_at"].as_str().unwrap()));
    assert!(is_iso_micros(r["updated_at"].as_str().unwrap()));
    for info in r["integrity_info"].as_array().unwrap() {
        for k in [
            "integrity_provider",
            "search_id",
            "search_index",
            "explorer_url",
            "created_at",
        ] {
            assert!(info[k].is_string(), "{id}: integrity_info.{k}");
        }
        assert!(is_url(&info["explorer_url"]));
        assert!(is_iso_micros(info["created_at"].as_str().unwrap()));
        if info["integrity_provider"] == "nit" {
            assert!(is_hex(info["search_id"].as_str().unwrap(), true, 64));
            assert_eq!(info["search_index"], r["cid"]);
        }
    }
    assert!(
        r["integrity_providers"]
            .as_array()
            .unwrap()
            .iter()
            .all(Value::is_string)
    );
    let proof = &r["information"]["proof"];
    assert!(
        proof["hash"].is_string() && proof["mimeType"].is_string() && proof["timestamp"].is_i64(),
        "{id}: {proof}"
    );
    assert_eq!(proof["hash"].as_str().unwrap().trim(), r["proof_hash"]);
    if let Some(items) = r["information"].get("information") {
        for it in items.as_array().unwrap() {
            assert!(it["provider"].is_string() && it["name"].is_string());
            assert!(it["value"].is_string() || it["value"].is_number());
        }
    }
    let sm = r["signed_metadata"].as_str().unwrap();
    if !sm.is_empty() {
        let doc: Value = serde_json::from_str(sm).unwrap();
        assert_eq!(doc["spec_version"], "2.0.0");
        assert_eq!(
            r["metadata_cid"].as_str().unwrap(),
            cid_v1_raw(sm.as_bytes())
        );
    }
    for s in r["signature"].as_array().unwrap() {
        assert!(s["provider"].is_string() && s["proofHash"].is_string());
        if let Some(sig) = s.get("signature") {
            assert!(is_hex(sig.as_str().unwrap(), true, 130));
        }
        if let Some(pk) = s.get("publicKey") {
            assert!(is_hex(pk.as_str().unwrap(), true, 40));
        }
        if let Some(i) = s.get("integritySha") {
            assert!(is_hex(i.as_str().unwrap(), false, 64));
        }
    }
    for k in ["asset_wallet_address", "managed_wallet_address"] {
        assert!(is_hex(r["owner_addresses"][k].as_str().unwrap(), true, 40));
        let c = &r["creator_addresses"][k];
        if r["creator"].is_null() {
            assert!(c.is_null());
        } else {
            assert!(is_hex(c.as_str().unwrap(), true, 40));
        }
    }
    let minted = !r["nft_token_id"].is_null();
    assert_eq!(minted, r["nft_chain_id"].is_i64());
    if minted {
        assert_eq!(r["nft_spec"], "erc721");
        assert!(r["nft_token_uri"].as_str().unwrap().starts_with("ipfs://"));
        assert!(is_hex(
            r["nft_creation_tx_hash"].as_str().unwrap(),
            true,
            64
        ));
        assert!(is_hex(r["nft_creator_address"].as_str().unwrap(), true, 40));
    } else {
        for k in [
            "nft_spec",
            "nft_token_uri",
            "nft_creation_tx_hash",
            "nft_creator_address",
            "nft_blockchain_name",
            "nft_contract_address",
        ] {
            assert_eq!(r[k], "", "{id}: unminted {k}");
        }
    }
    let st = &r["source_transaction"];
    assert_eq!(
        r["source_type"] == "store",
        st.is_object(),
        "{id}: source_transaction iff store"
    );
    if st.is_object() {
        for k in [
            "id",
            "type",
            "sender",
            "sender_name",
            "receiver_email",
            "receiver_address",
            "receiver_name",
            "checkout_order_id",
        ] {
            assert!(st[k].is_string(), "{id}: source_transaction.{k}");
        }
        for k in ["created_at", "fulfilled_at", "expired_at"] {
            assert!(is_iso_micros(st[k].as_str().unwrap()));
        }
        assert!(st["expired"].is_boolean());
    }
    for p in r["preexisting"].as_array().unwrap() {
        for k in ["id", "asset", "preexisting", "created_at", "updated_at"] {
            assert!(p[k].is_string());
        }
    }
    let pm = &r["parsed_meta"];
    assert_eq!(pm["proof_hash"], r["proof_hash"]);
    assert!(pm["mime_type"].is_string() && pm["capture_time"].is_i64());
    for (k, v) in r["nit_commit_custom"].as_object().unwrap() {
        assert!(
            ["usedBy", "assetSourceType", "digitalSourceType"].contains(&k.as_str())
                && v.is_string()
        );
    }
}

#[tokio::test]
async fn every_seeded_record_has_every_field_with_its_stated_type_and_the_seed_covers_every_shape()
{
    let reg = Registry::start(400, None).await;
    let records = reg.all_records().await;
    assert_eq!(records.len(), 400);
    for r in &records {
        check_record(r);
    }
    let has = |f: &dyn Fn(&Value) -> bool| records.iter().any(f);
    assert!(has(&|r| r["type"] == "unique") && has(&|r| r["type"] == "child"));
    for p in ["nit", "iota_legacy", "iota_chrysalis"] {
        assert!(
            has(&|r| r["integrity_info"]
                .as_array()
                .unwrap()
                .iter()
                .any(|i| i["integrity_provider"] == p)),
            "{p}"
        );
    }
    assert!(has(&|r| r["signature"].as_array().unwrap().is_empty()));
    assert!(has(&|r| r["signature"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s.get("integritySha").is_some())));
    assert!(has(&|r| r["signature"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s.get("signature").is_none())));
    assert!(has(&|r| r["signature"].as_array().unwrap().iter().any(
        |s| s.get("publicKey").is_some() && s.get("integritySha").is_none()
    )));
    assert!(has(&|r| r["nft_token_id"].is_string()) && has(&|r| r["nft_token_id"].is_null()));
    assert!(has(&|r| r["source_type"] == "store"));
    assert!(has(&|r| r["caption"].as_str().unwrap().contains('\n')));
    assert!(has(&|r| r["signed_metadata"] == "") && has(&|r| r["signed_metadata"] != ""));
    assert!(has(&|r| r["information"]["proof"]["hash"]
        .as_str()
        .unwrap()
        .starts_with(' ')));
    assert!(has(&|r| r["creator"].is_null()));
    assert!(has(&|r| !r["preexisting"].as_array().unwrap().is_empty()));
    assert!(has(&|r| r["certified_asset"].is_string()) && has(&|r| r["certified_asset"].is_null()));
    let mimes: HashSet<&str> = records
        .iter()
        .map(|r| r["asset_file_mime_type"].as_str().unwrap())
        .collect();
    assert!(
        mimes.contains("image/jpeg")
            && mimes.contains("image/png")
            && mimes.contains("application/json")
            && mimes.contains("video/mp4")
    );
    // Deterministic: a second server seeded with the same N lists the same records (URLs aside).
    let again = Registry::start(400, None).await;
    let strip = |r: &Value| {
        r["uuid"].as_str().unwrap().to_owned()
            + r["signed_metadata"].as_str().unwrap()
            + r["uploaded_at"].as_str().unwrap()
    };
    let first: Vec<String> = records.iter().map(strip).collect();
    let second: Vec<String> = again.all_records().await.iter().map(strip).collect();
    assert_eq!(first, second);
}

fn multipart(parts: &[(&str, Option<&str>, &[u8])]) -> (String, Vec<u8>) {
    let boundary = "----registry-test-boundary-7d3f";
    let mut body = Vec::new();
    for (name, file_name, data) in parts {
        body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        match file_name {
            Some(f) => body.extend_from_slice(format!("Content-Disposition: form-data; name=\"{name}\"; filename=\"{f}\"\r\nContent-Type: image/jpeg\r\n\r\n").as_bytes()),
            None => body.extend_from_slice(format!("Content-Disposition: form-data; name=\"{name}\"\r\n\r\n").as_bytes()),
        }
        body.extend_from_slice(data);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

#[tokio::test]
async fn post_registers_a_real_file_on_top_and_rejects_bad_requests() {
    let reg = Registry::start(30, Some(TOKEN)).await;
    let endpoint = reg.url("/api/v3/assets/");
    let file: Vec<u8> = (0..5000u32).flat_map(|i| i.to_le_bytes()).collect();
    let (ct, body) = multipart(&[
        ("asset_file", Some("field-photo.jpg"), &file),
        ("caption", None, "Line one\nLine two".as_bytes()),
        ("headline", None, b"Registered by a test"),
        (
            "signed_metadata",
            None,
            br#"{"spec_version":"2.0.0","recorder":"test"}"#,
        ),
        (
            "signature",
            None,
            br#"[{"provider":"AssetSignature","proofHash":"ab"}]"#,
        ),
        (
            "nit_commit_custom",
            None,
            br#"{"usedBy":"https://example.org/story"}"#,
        ),
        ("meta", None, br#"{"proof":{"timestamp":1700000000}}"#),
    ]);
    let post = |ct: &str, body: Vec<u8>, token: Option<&str>| {
        let mut rq = reg
            .client
            .post(&endpoint)
            .header("content-type", ct)
            .body(body);
        if let Some(t) = token {
            rq = rq.header("authorization", format!("token {t}"));
        }
        rq.send()
    };
    // 401 without or with a wrong token.
    let r = post(&ct, body.clone(), None).await.unwrap();
    assert_eq!(r.status(), 401);
    assert_drf_headers(&r);
    assert_eq!(
        post(&ct, body.clone(), Some("wrong"))
            .await
            .unwrap()
            .status(),
        401
    );
    // 415 for a JSON body.
    let r = post("application/json", b"{}".to_vec(), Some(TOKEN))
        .await
        .unwrap();
    assert_eq!(r.status(), 415);
    let e: Value = r.json().await.unwrap();
    assert!(
        e["detail"]
            .as_str()
            .unwrap()
            .starts_with("Unsupported media type"),
        "{e}"
    );

    let r = post(&ct, body.clone(), Some(TOKEN)).await.unwrap();
    assert_eq!(r.status(), 201);
    assert_drf_headers(&r);
    let created: Value = r.json().await.unwrap();
    check_record(&created);
    let cid = cid_v1_raw(&file);
    assert_eq!(created["cid"], cid.as_str());
    assert_eq!(created["proof_hash"], hex::encode(Sha256::digest(&file)));
    assert_eq!(created["asset_file_size"], file.len());
    assert_eq!(created["caption"], "Line one\nLine two");
    assert_eq!(created["information"]["proof"]["timestamp"], 1_700_000_000);
    assert_eq!(
        created["nit_commit_custom"]["usedBy"],
        "https://example.org/story"
    );

    // First in the list, count grew, and its file is served back byte for byte.
    let page = reg.get_json(&endpoint).await;
    assert_eq!(page["count"], 31);
    assert_eq!(page["results"][0]["cid"], cid.as_str());
    let served = reg
        .client
        .get(page["results"][0]["asset_file"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(served.status(), 200);
    assert_eq!(served.headers()["content-type"], "image/jpeg");
    assert_eq!(served.bytes().await.unwrap().as_ref(), file.as_slice());

    // Duplicate content.
    let r = post(&ct, body.clone(), Some(TOKEN)).await.unwrap();
    assert_eq!(r.status(), 409);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["cid"], cid.as_str(), "{e}");
    assert!(e["detail"].as_str().unwrap().contains("already registered"));

    // Bad fields: every one named.
    let (ct2, bad) = multipart(&[
        ("asset_file", Some("other.jpg"), b"other bytes"),
        (
            "headline",
            None,
            b"This headline is far longer than twenty-five characters",
        ),
        ("meta", None, b"not json"),
        ("signed_metadata", None, b"[1,2]"),
        ("signature", None, br#"[{"provider":"x"}]"#),
        ("nit_commit_custom", None, b"42"),
    ]);
    let r = post(&ct2, bad, Some(TOKEN)).await.unwrap();
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    // DRF's ValidationError: the field names, each with its messages.
    let details = e.as_object().unwrap();
    assert!(details.values().all(Value::is_array), "{e}");
    for f in [
        "headline",
        "meta",
        "signed_metadata",
        "signature",
        "nit_commit_custom",
    ] {
        assert!(details.contains_key(f), "{f} not named in {e}");
    }
    assert!(!details.contains_key("asset_file"));
    let (ct3, no_file) = multipart(&[("caption", None, b"no file")]);
    let e: Value = post(&ct3, no_file, Some(TOKEN))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        e,
        serde_json::json!({"asset_file": ["No file was submitted."]})
    );

    // 413 over the cap (the connection may be closed early; a status, when read, is 413).
    let big = vec![7u8; UPLOAD_CAP + 1];
    let (ct4, too_big) = multipart(&[("asset_file", Some("big.bin"), &big)]);
    let r = post(&ct4, too_big, Some(TOKEN)).await.unwrap();
    assert_eq!(r.status(), 413);
    assert_eq!(
        reg.get_json(&endpoint).await["count"],
        31,
        "nothing registered by rejected requests"
    );
}

#[tokio::test]
async fn post_is_refused_when_no_token_is_configured() {
    let reg = Registry::start(3, None).await;
    let (ct, body) = multipart(&[("asset_file", Some("a.jpg"), b"abc")]);
    let r = reg
        .client
        .post(reg.url("/api/v3/assets/"))
        .header("content-type", ct)
        .header("authorization", "token anything")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let e: Value = r.json().await.unwrap();
    assert!(
        e["detail"]
            .as_str()
            .unwrap()
            .starts_with("Asset registration is disabled"),
        "{e}"
    );
}

#[tokio::test]
async fn signed_urls_serve_real_files_and_refuse_expired_or_tampered_ones() {
    let reg = Registry::start(20, None).await;
    let records = reg.all_records().await;
    for r in &records {
        let url = r["asset_file"].as_str().unwrap();
        let resp = reg.client.get(url).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{url}");
        assert_eq!(
            resp.headers()["content-type"],
            r["asset_file_mime_type"].as_str().unwrap()
        );
        let bytes = resp.bytes().await.unwrap();
        assert_eq!(bytes.len() as u64, r["asset_file_size"].as_u64().unwrap());
        assert_eq!(
            hex::encode(Sha256::digest(&bytes)),
            r["proof_hash"].as_str().unwrap()
        );
        assert_eq!(cid_v1_raw(&bytes), r["cid"].as_str().unwrap());
        for k in [
            "asset_file_snapshot",
            "asset_file_thumbnail",
            "certificate_qrcode",
            "owner_profile_picture",
            "certified_asset",
        ] {
            if let Some(u) = r[k].as_str() {
                let resp = reg.client.get(u).send().await.unwrap();
                assert_eq!(resp.status(), 200, "{k}: {u}");
                assert!(
                    resp.headers()["content-type"]
                        .to_str()
                        .unwrap()
                        .starts_with("image/")
                );
            }
        }
    }
    let url = records[0]["asset_file"].as_str().unwrap();
    let expires: u64 = url
        .split("Expires=")
        .nth(1)
        .unwrap()
        .split('&')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(expires > unix_now() + 3000 && expires <= unix_now() + 3600);
    let forbidden = |u: String| {
        let c = reg.client.clone();
        async move { c.get(&u).send().await.unwrap().status() }
    };
    // Tampered signature, path, expiry; missing parameters.
    let sig_at = url.find("Signature=").unwrap() + "Signature=".len();
    let mut tampered = url.to_owned();
    let flipped = if &url[sig_at..=sig_at] == "A" {
        "B"
    } else {
        "A"
    };
    tampered.replace_range(sig_at..=sig_at, flipped);
    assert_eq!(forbidden(tampered).await, 403);
    let other_cid = records[1]["cid"].as_str().unwrap();
    let this_cid = records[0]["cid"].as_str().unwrap();
    assert_eq!(forbidden(url.replace(this_cid, other_cid)).await, 403);
    assert_eq!(
        forbidden(url.replace(
            &format!("Expires={expires}"),
            &format!("Expires={}", expires + 60)
        ))
        .await,
        403
    );
    assert_eq!(
        forbidden(url.split('?').next().unwrap().to_owned()).await,
        403
    );
    // Expired: a correctly signed URL whose Expires has passed.
    let path = format!("/media/a/{this_cid}");
    let signer = UrlSigner::new(KEY, Duration::from_secs(3600));
    let past = unix_now() - 5;
    let expired = reg.url(&format!(
        "{path}?Expires={past}&Signature={}&Key-Pair-Id={}",
        signer.signature(&path, past),
        signer.key_id()
    ));
    let r = reg.client.get(&expired).send().await.unwrap();
    assert_eq!(r.status(), 403);
    let e: Value = r.json().await.unwrap();
    assert!(e["detail"].as_str().unwrap().contains("expired"), "{e}");
    // The same construction with a future expiry is accepted (the test signs exactly as the server).
    let future = unix_now() + 100;
    let ok = reg.url(&format!(
        "{path}?Expires={future}&Signature={}&Key-Pair-Id={}",
        signer.signature(&path, future),
        signer.key_id()
    ));
    assert_eq!(reg.client.get(&ok).send().await.unwrap().status(), 200);
    // The verification page of certificate_link is served.
    let page = reg
        .client
        .get(records[0]["certificate_link"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains(this_cid));
}

#[tokio::test]
async fn head_equals_get_minus_the_body() {
    let reg = Registry::start(25, None).await;
    for q in ["", "?limit=5&offset=3", "?format=api", "?format=nope"] {
        let url = reg.url(&format!("/api/v3/assets/{q}"));
        // A page's signed URLs (and so its bytes and ETag) change when the expiry bucket does: take GET and
        // HEAD within one bucket (a pair that straddles a boundary is taken again).
        let (mut get, mut head) = (None, None);
        for _ in 0..3 {
            let g = reg.client.get(&url).send().await.unwrap();
            let h = reg.client.head(&url).send().await.unwrap();
            let same_bucket = g.headers().get("etag") == h.headers().get("etag");
            (get, head) = (Some(g), Some(h));
            if same_bucket {
                break;
            }
        }
        let (get, head) = (get.unwrap(), head.unwrap());
        assert_eq!(get.status(), head.status(), "{url}");
        let mut gh = get.headers().clone();
        let mut hh = head.headers().clone();
        gh.remove("date");
        hh.remove("date");
        assert_eq!(gh, hh, "{url}");
        assert!(gh.contains_key("content-length"));
        let body = get.bytes().await.unwrap();
        assert_eq!(
            gh["content-length"].to_str().unwrap(),
            body.len().to_string()
        );
        assert!(head.bytes().await.unwrap().is_empty());
    }
}

#[tokio::test]
async fn drf_surface_formats_negotiation_options_and_405() {
    let reg = Registry::start(250, None).await;
    let url = reg.url("/api/v3/assets/");
    // format=json
    let r = reg
        .client
        .get(format!("{url}?format=json&limit=2&offset=4"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-type"], "application/json");
    let page: Value = r.json().await.unwrap();
    assert_eq!(
        page["next"].as_str().unwrap(),
        format!("{url}?format=json&limit=2&offset=6")
    );
    // format=api: HTML with the same body, links clickable and keeping format=api.
    let r = reg
        .client
        .get(format!("{url}?format=api"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_drf_headers(&r);
    assert_eq!(r.headers()["content-type"], "text/html; charset=utf-8");
    let html = r.text().await.unwrap();
    assert!(
        html.contains(&format!(
            "<a href=\"{url}?format=api&#38;limit=200&#38;offset=200\">"
        )),
        "next link clickable"
    );
    assert!(html.contains("\"count\": 250"), "{html}");
    // DRF's page controls (250 records, 200 per page: two pages), the JSON's own key order, the format and
    // OPTIONS buttons, the POST form; and no more than about twice the JSON's size.
    assert!(html.contains(r#"aria-current="page">1</a>"#), "{html}");
    assert!(html.contains(">2</a>"));
    let order: Vec<usize> = ["\"count\"", "\"next\"", "\"previous\"", "\"results\""]
        .iter()
        .map(|k| html.find(&format!("{k}: ")).unwrap())
        .collect();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "keys in the JSON's order"
    );
    assert!(html.contains(r#"id="options-btn""#) && html.contains(r#"id="post-form""#));
    let json_len = reg
        .client
        .get(format!("{url}?format=json"))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap()
        .len();
    assert!(html.len() <= 2 * json_len, "{} vs {json_len}", html.len());
    // Like DRF's: the request, the status, the headers and the JSON first; the page's images folded away
    // after it (a closed <details>: not loaded until opened).
    let response = html.find(r#"<pre class="json" id="response">"#).unwrap();
    assert!(
        html[response..].starts_with(
            "<pre class=\"json\" id=\"response\"><span class=\"response-info\"><b>GET \
             /api/v3/assets/?format=api</b>\n\n<b>HTTP 200 OK</b>"
        ),
        "{html}"
    );
    let previews = html
        .find(r#"<details class="previews"><summary>Media previews ("#)
        .expect("previews");
    assert!(response < previews);
    assert!(html.find("<img").unwrap() > previews);
    // A browser's Accept prefers HTML; */* gets JSON.
    let r = reg
        .client
        .get(&url)
        .header(
            "accept",
            "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-type"], "text/html; charset=utf-8");
    let r = reg
        .client
        .get(&url)
        .header("accept", "*/*")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-type"], "application/json");
    // Unknown format → 404; unsatisfiable Accept → 406; both with Allow/Vary.
    let r = reg
        .client
        .get(format!("{url}?format=xml"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_drf_headers(&r);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        serde_json::json!({"detail": "Not found."})
    );
    let r = reg
        .client
        .get(&url)
        .header("accept", "image/png")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 406);
    assert_drf_headers(&r);
    // OPTIONS metadata.
    let r = reg
        .client
        .request(reqwest::Method::OPTIONS, &url)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_drf_headers(&r);
    let meta: Value = r.json().await.unwrap();
    assert_eq!(
        meta["renders"],
        serde_json::json!(["application/json", "text/html"])
    );
    assert_eq!(meta["actions"]["POST"]["headline"]["max_length"], 25);
    assert_eq!(meta["actions"]["POST"]["asset_file"]["required"], true);
    assert!(meta["name"].is_string() && meta["parses"].is_array());
    // Other methods → 405 with Allow.
    for m in [
        reqwest::Method::PUT,
        reqwest::Method::DELETE,
        reqwest::Method::PATCH,
    ] {
        let r = reg.client.request(m.clone(), &url).send().await.unwrap();
        assert_eq!(r.status(), 405, "{m}");
        assert_drf_headers(&r);
        let e: Value = r.json().await.unwrap();
        assert_eq!(e["detail"], format!("Method \"{m}\" not allowed."));
    }
}

#[tokio::test]
async fn an_uploaded_html_file_is_served_sandboxed() {
    let reg = Registry::start(3, Some(TOKEN)).await;
    let boundary = "----registry-test-boundary-html";
    let html = b"<!doctype html><script>alert(document.domain)</script>";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"asset_file\"; filename=\"page.html\"\r\n\
         Content-Type: text/html\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(html);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let created = reg
        .client
        .post(reg.url("/api/v3/assets/"))
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .header("authorization", format!("token {TOKEN}"))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let record: Value = created.json().await.unwrap();
    assert_eq!(record["asset_file_mime_type"], "text/html");
    let file = reg
        .client
        .get(record["asset_file"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(file.status(), 200);
    assert_eq!(file.headers()["content-type"], "text/html");
    let csp = file.headers()["content-security-policy"].to_str().unwrap();
    assert!(csp.split(';').any(|d| d.trim() == "sandbox"), "{csp}");
    assert_eq!(file.bytes().await.unwrap().as_ref(), html);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_database_keep_the_listing_dense_under_concurrent_uploads() {
    // Two registries with their own connections (pools) on one database and one shared media directory,
    // as two processes behind a load balancer would be: instance B is seeded by A's start (a no-op).
    let dir = TempDir::new();
    let url = super::common::fresh_database(dir.path(), "shared.sqlite3").await;
    let media = dir.path().join("media");
    let a = Registry::start_on(&url, &media, TempDir::new(), 20, Some(TOKEN)).await;
    let b = Registry::start_on(&url, &media, TempDir::new(), 20, Some(TOKEN)).await;
    let post = |reg: &Registry, i: u32| {
        let file: Vec<u8> = (0..2000u32)
            .flat_map(|j| (j ^ (i << 16)).to_le_bytes())
            .collect();
        let (ct, body) = multipart(&[("asset_file", Some("upload.jpg"), &file)]);
        let rq = reg
            .client
            .post(reg.url("/api/v3/assets/"))
            .header("content-type", ct)
            .header("authorization", format!("token {TOKEN}"))
            .body(body);
        async move {
            let r = rq.send().await.unwrap();
            assert_eq!(r.status(), 201);
            let created: Value = r.json().await.unwrap();
            (created["cid"].as_str().unwrap().to_owned(), file)
        }
    };
    // One upload on A is listed first by B, with the count one higher, and B serves its file.
    let (cid, file) = post(&a, 0).await;
    let page = b.get_json(&b.url("/api/v3/assets/")).await;
    assert_eq!(page["count"], 21);
    assert_eq!(page["results"][0]["cid"], cid.as_str());
    let served = b
        .client
        .get(page["results"][0]["asset_file"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(served.status(), 200);
    assert_eq!(served.bytes().await.unwrap().as_ref(), file.as_slice());
    // 40 concurrent uploads, half on each instance.
    let uploads: Vec<_> = (1..=40u32)
        .map(|i| tokio::spawn(post(if i % 2 == 0 { &a } else { &b }, i)))
        .collect();
    let mut cids = HashSet::new();
    for u in uploads {
        cids.insert(u.await.unwrap().0);
    }
    assert_eq!(cids.len(), 40);
    // Both instances list the same 61 records, each once, newest first: the dense rank stayed dense and
    // unique (a gap or a duplicate position would lose or repeat a record in the walk).
    let (from_a, from_b) = (a.all_records().await, b.all_records().await);
    assert_eq!(from_a.len(), 61);
    let ids = |v: &[Value]| {
        v.iter()
            .map(|r| r["cid"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&from_a), ids(&from_b));
    let distinct: HashSet<_> = ids(&from_a).into_iter().collect();
    assert_eq!(distinct.len(), 61);
    assert!(cids.iter().all(|c| distinct.contains(c)));
    let uploaded: Vec<&str> = from_a
        .iter()
        .map(|r| r["uploaded_at"].as_str().unwrap())
        .collect();
    assert!(uploaded.windows(2).all(|w| w[0] >= w[1]), "newest first");
    assert_eq!(b.get_json(&b.url("/api/v3/assets/")).await["count"], 61);
}

#[tokio::test]
async fn one_asset_has_its_own_route_with_the_records_json_and_drfs_404() {
    let reg = Registry::start(5, None).await;
    let list = reg.get_json(&reg.url("/api/v3/assets/")).await;
    let first = &list["results"][0];
    let cid = first["cid"].as_str().unwrap();
    let url = reg.url(&format!("/api/v3/assets/{cid}/"));
    let one = reg.get_json(&url).await;
    assert_eq!(one["cid"], first["cid"]);
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&one), keys(first));
    for key in [
        "proof_hash",
        "asset_file_name",
        "owner_profile_display_name",
        "integrity_info",
    ] {
        assert_eq!(one[key], first[key], "{key}");
    }
    // The raw bytes keep the list's key order.
    let raw = reg.client.get(&url).send().await.unwrap();
    assert_eq!(raw.headers()["allow"], "GET, HEAD, OPTIONS");
    assert_eq!(raw.headers()["content-type"], "application/json");
    let text = raw.text().await.unwrap();
    assert!(text.starts_with(r#"{"cid":"#) || text.find("\"cid\"").is_some());
    // The browsable page of one asset.
    let page = reg
        .client
        .get(format!("{url}?format=api"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
    let html = page.text().await.unwrap();
    assert!(html.contains("<h1>Asset Instance</h1>"), "{html}");
    assert!(html.contains(cid));
    // Unknown: DRF's 404; POST: DRF's 405; OPTIONS: the detail view's metadata.
    let missing = reg
        .client
        .get(reg.url("/api/v3/assets/bafkreinothere/"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    assert_eq!(
        missing.json::<Value>().await.unwrap(),
        serde_json::json!({"detail": "No Asset matches the given query."})
    );
    let post = reg.client.post(&url).send().await.unwrap();
    assert_eq!(post.status(), 405);
    assert_eq!(
        post.json::<Value>().await.unwrap()["detail"],
        "Method \"POST\" not allowed."
    );
    let options = reg
        .client
        .request(reqwest::Method::OPTIONS, &url)
        .send()
        .await
        .unwrap();
    assert_eq!(
        options.json::<Value>().await.unwrap()["name"],
        "Asset Instance"
    );
}

/// The paid bulk export (`upto`): the 402 offers `limit` x the per-record price as the maximum; a paid
/// export is charged for the records it returned, an empty one nothing; a resend gets the same answer; the
/// settlement log records the charge.
#[tokio::test]
async fn the_paid_export_charges_for_the_records_it_returns() {
    use crate::common::{Payer, TestServer, decode_header};
    let server = TestServer::start().await;
    let export = |query: &str| format!("/api/v3/assets/export/?{query}");

    let refused = server.get(&export("offset=1")).await;
    assert_eq!(refused.status(), 400, "limit is required");
    let body: Value = refused.json().await.unwrap();
    assert!(
        body["limit"][0]
            .as_str()
            .unwrap()
            .contains("limit is required"),
        "{body}"
    );
    assert_eq!(server.get(&export("limit=201")).await.status(), 400);

    let priced = server.get(&export("limit=3")).await;
    assert_eq!(priced.status(), 402);
    let required = decode_header(&priced, "payment-required");
    let offer = &required["accepts"][0];
    assert_eq!(offer["scheme"], "upto", "{required}");
    assert_eq!(offer["amount"], "300", "3 records at 100 each, at most");
    assert_eq!(offer["extra"]["assetTransferMethod"], "permit2");

    let header = Payer::new().pay_v2(&required);
    let paid = server
        .get_with(
            &server.url(&export("limit=3")),
            "PAYMENT-SIGNATURE",
            &header,
        )
        .await;
    assert_eq!(paid.status(), 200);
    let receipt = decode_header(&paid, "payment-response");
    assert_eq!(receipt["amount"], "300", "{receipt}");
    let records: Value = paid.json().await.unwrap();
    assert_eq!(records.as_array().unwrap().len(), 3);
    // Resent: the same answer, charged once.
    let again = server
        .get_with(
            &server.url(&export("limit=3")),
            "PAYMENT-SIGNATURE",
            &header,
        )
        .await;
    assert_eq!(decode_header(&again, "payment-response"), receipt);

    // Past the end: nothing returned, nothing charged, and the receipt says so.
    let past = server.get(&export("limit=5&offset=100000")).await;
    let required = decode_header(&past, "payment-required");
    assert_eq!(required["accepts"][0]["amount"], "500");
    let header = Payer::new().pay_v2(&required);
    let empty = server
        .get_with(
            &server.url(&export("limit=5&offset=100000")),
            "PAYMENT-SIGNATURE",
            &header,
        )
        .await;
    assert_eq!(empty.status(), 200);
    let receipt = decode_header(&empty, "payment-response");
    assert_eq!(
        (receipt["amount"].as_str(), receipt["transaction"].as_str()),
        (Some("0"), Some(""))
    );
    assert_eq!(empty.json::<Value>().await.unwrap(), serde_json::json!([]));

    // The settlement log has the charges, not the maxima.
    let log = crate::licensing::settlement_rows(&server, "settled", None).await;
    let mut amounts: Vec<&str> = log
        .iter()
        .filter(|r| {
            r["resource"]
                .as_str()
                .unwrap_or_default()
                .contains("/export/")
        })
        .map(|r| r["amount_atomic"].as_str().unwrap())
        .collect();
    amounts.sort_unstable();
    assert_eq!(amounts, ["0", "300"], "{log:?}");
}
