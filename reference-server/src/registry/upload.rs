//! `POST /api/v3/assets/`: register an uploaded file.
//!
//! Order of checks: token (403 when registration is disabled, 401 when the token is missing or wrong),
//! media type (415 unless `multipart/form-data`), size (413 over `max_upload_bytes`), fields (400 naming
//! every bad field), duplicate content (409). Then the file is written to the media directory and the
//! record inserted; the answer is 201 with the full record.

#![allow(
    clippy::result_large_err,
    reason = "errors here are complete HTTP answers, built once per request"
)]

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{FromRequest, Multipart, Request, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use serde_json::{Map, Value, json};

use super::Registry;
use super::handlers::{error, render_one, store_error};
use super::media::{Derived, cid_v1_raw, sha256_hex};
use super::model::*;
use crate::store::StoreError;
use crate::store::assets::{FileSource, NewAsset};

/// Room for multipart boundaries and text fields on top of the file cap.
pub(crate) const MULTIPART_OVERHEAD: usize = 1024 * 1024;
/// Largest caption, in characters.
pub(crate) const MAX_CAPTION: usize = 10_000;
/// Largest headline, in characters (interfaces.md: <= 25).
pub(crate) const MAX_HEADLINE: usize = 25;
/// Largest JSON text field, in bytes.
const MAX_JSON_FIELD: usize = 64 * 1024;

/// The account uploads are registered to (the API token's owner).
const UPLOADER: (&str, &str, &str) = ("api@reference-server.local", "api", "Registry API");

type FieldErrors = BTreeMap<&'static str, Vec<String>>;

/// The multipart form `POST /api/v3/assets/` takes (documentation of the wire; the handler reads the parts).
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub(crate) struct UploadForm {
    /// The media file; its CIDv1 and SHA-256 are computed by the server.
    #[schema(value_type = String, format = Binary)]
    asset_file: Vec<u8>,
    /// Caption (at most 10,000 characters).
    #[schema(required = false)]
    caption: String,
    /// Headline (at most 25 characters).
    #[schema(required = false)]
    headline: String,
    /// JSON object; `proof` and `information` fill the record's `information`.
    #[schema(required = false)]
    meta: String,
    /// JSON object, stored as a string.
    #[schema(required = false)]
    signed_metadata: String,
    /// JSON array of `{provider, proofHash, signature?, publicKey?, integritySha?}`.
    signature: Option<String>,
    /// JSON object.
    nit_commit_custom: Option<String>,
}

/// `POST /api/v3/assets/`: register a file.
#[utoipa::path(
    post,
    path = "/api/v3/assets/",
    tag = "registry",
    operation_id = "createAsset",
    summary = "Register a file (needs the API token)",
    request_body(content = UploadForm, content_type = "multipart/form-data"),
    security(("token" = [])),
    responses(
        (status = 201, description = "Registered: the new record.", body = AssetRecord),
        (status = 400, description = "Invalid input (DRF's `{field: [messages]}`) or a malformed body (`detail`).", body = super::handlers::DrfInvalid),
        (status = 401, description = "No or a wrong `Authorization: token <t>`.", body = super::handlers::DrfError),
        (status = 403, description = "Registration is disabled (no API token configured).", body = super::handlers::DrfError),
        (status = 409, description = "The same file is already registered (its `cid` beside `detail`).", body = super::handlers::DrfError),
        (status = 413, description = "The file exceeds the size limit (`max_bytes` beside `detail`).", body = super::handlers::DrfError),
        (status = 415, description = "Not multipart/form-data.", body = super::handlers::DrfError),
    ),
)]
pub(crate) async fn create(State(reg): State<Arc<Registry>>, req: Request) -> Response {
    if let Err(r) = authorize(&reg, req.headers()) {
        return r;
    }
    let ct = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    if !ct.to_ascii_lowercase().starts_with("multipart/form-data") {
        let shown: String = ct.chars().take(100).collect();
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            &format!("Unsupported media type \"{shown}\" in request; send multipart/form-data."),
            Value::Null,
        );
    }
    let cap = reg.cfg.max_upload_bytes;
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > (cap + MULTIPART_OVERHEAD) as u64) {
        return too_large(cap);
    }
    let multipart = match Multipart::from_request(req, &()).await {
        Ok(m) => m,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "parse_error",
                &format!("Malformed multipart body: {}", e.body_text()),
                Value::Null,
            );
        }
    };
    let form = match read_form(multipart, cap).await {
        Ok(f) => f,
        Err(r) => return r,
    };
    register(&reg, form).await
}

fn too_large(cap: usize) -> Response {
    error(
        StatusCode::PAYLOAD_TOO_LARGE,
        "file_too_large",
        &format!("The uploaded file exceeds the limit of {cap} bytes."),
        json!({"max_bytes": cap}),
    )
}

fn authorize(reg: &Registry, headers: &http::HeaderMap) -> Result<(), Response> {
    let Some(expected) = reg.cfg.api_token.as_deref() else {
        return Err(error(
            StatusCode::FORBIDDEN,
            "registration_disabled",
            "Asset registration is disabled: the server has no API token configured (--api-token).",
            Value::Null,
        ));
    };
    let given = crate::web::auth::credential(headers, "token");
    match given {
        Some(t) if crate::web::auth::constant_time_eq(t.as_bytes(), expected.as_bytes()) => Ok(()),
        other => {
            let message = if other.is_some() {
                "Invalid token."
            } else {
                "Authentication credentials were not provided."
            };
            let mut r = error(
                StatusCode::UNAUTHORIZED,
                "not_authenticated",
                message,
                Value::Null,
            );
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Token"));
            Err(r)
        }
    }
}

#[derive(Default)]
struct Form {
    file: Option<(String, Option<String>, Vec<u8>)>,
    text: BTreeMap<&'static str, String>,
}

const TEXT_FIELDS: [&str; 6] = [
    "caption",
    "headline",
    "meta",
    "signed_metadata",
    "signature",
    "nit_commit_custom",
];

async fn read_form(mut mp: Multipart, cap: usize) -> Result<Form, Response> {
    let mut form = Form::default();
    let bad = |e: axum::extract::multipart::MultipartError| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            too_large(cap)
        } else {
            error(
                StatusCode::BAD_REQUEST,
                "parse_error",
                &format!("Malformed multipart body: {}", e.body_text()),
                Value::Null,
            )
        }
    };
    while let Some(mut field) = mp.next_field().await.map_err(bad)? {
        let name = field.name().unwrap_or("").to_owned();
        if name == "asset_file" || name == "file" {
            let file_name = field
                .file_name()
                .unwrap_or("upload")
                .chars()
                .filter(|c| !c.is_control() && *c != '/' && *c != '\\')
                .take(255)
                .collect::<String>();
            let mime = field.content_type().map(str::to_owned);
            let mut bytes = Vec::new();
            while let Some(chunk) = field.chunk().await.map_err(bad)? {
                if bytes.len() + chunk.len() > cap {
                    return Err(too_large(cap));
                }
                bytes.extend_from_slice(&chunk);
            }
            form.file = Some((file_name, mime, bytes));
        } else if let Some(&key) = TEXT_FIELDS.iter().find(|k| **k == name) {
            let mut text = Vec::new();
            while let Some(chunk) = field.chunk().await.map_err(bad)? {
                if text.len() + chunk.len() > MAX_JSON_FIELD {
                    return Err(error(
                        StatusCode::BAD_REQUEST,
                        "validation_error",
                        "Invalid input.",
                        json!({ key: [format!("Ensure this field has no more than {MAX_JSON_FIELD} bytes.")] }),
                    ));
                }
                text.extend_from_slice(&chunk);
            }
            let text = String::from_utf8(text).map_err(|_| {
                error(
                    StatusCode::BAD_REQUEST,
                    "validation_error",
                    "Invalid input.",
                    json!({ key: ["Not valid UTF-8 text."] }),
                )
            })?;
            form.text.insert(key, text);
        }
        // Unknown fields are ignored, as DRF serializers do.
    }
    Ok(form)
}

struct Checked {
    caption: String,
    headline: String,
    meta: Option<Map<String, Value>>,
    signed_metadata: String,
    signature: Vec<SignatureEntry>,
    nit_commit_custom: Map<String, Value>,
}

fn json_object(
    errors: &mut FieldErrors,
    key: &'static str,
    text: Option<&String>,
) -> Option<Map<String, Value>> {
    let text = text.filter(|t| !t.trim().is_empty())?;
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => Some(m),
        Ok(_) => {
            errors
                .entry(key)
                .or_default()
                .push("Expected a JSON object.".into());
            None
        }
        Err(e) => {
            errors
                .entry(key)
                .or_default()
                .push(format!("Value must be valid JSON: {e}."));
            None
        }
    }
}

fn is_hex(s: &str, prefix: bool, len: usize) -> bool {
    let body = if prefix {
        s.strip_prefix("0x")
    } else {
        Some(s)
    };
    body.is_some_and(|b| b.len() == len && b.bytes().all(|c| c.is_ascii_hexdigit()))
}

fn check(form: &Form) -> Result<Checked, FieldErrors> {
    let mut errors = FieldErrors::new();
    if form.file.is_none() {
        errors
            .entry("asset_file")
            .or_default()
            .push("No file was submitted.".into());
    } else if form.file.as_ref().is_some_and(|f| f.2.is_empty()) {
        errors
            .entry("asset_file")
            .or_default()
            .push("The submitted file is empty.".into());
    }
    let caption = form.text.get("caption").cloned().unwrap_or_default();
    if caption.chars().count() > MAX_CAPTION {
        errors.entry("caption").or_default().push(format!(
            "Ensure this field has no more than {MAX_CAPTION} characters."
        ));
    }
    let headline = form.text.get("headline").cloned().unwrap_or_default();
    if headline.chars().count() > MAX_HEADLINE {
        errors.entry("headline").or_default().push(format!(
            "Ensure this field has no more than {MAX_HEADLINE} characters."
        ));
    }
    let meta = json_object(&mut errors, "meta", form.text.get("meta"));
    // Kept byte for byte: it is a signed document (and `metadata_cid` is the CID of these bytes), so
    // re-serialising it (key order, spacing, number forms) would break its signature.
    let signed_metadata = json_object(
        &mut errors,
        "signed_metadata",
        form.text.get("signed_metadata"),
    )
    .and(form.text.get("signed_metadata").cloned())
    .unwrap_or_default();
    let nit_commit_custom = json_object(
        &mut errors,
        "nit_commit_custom",
        form.text.get("nit_commit_custom"),
    )
    .unwrap_or_default();
    let mut signature = Vec::new();
    if let Some(text) = form.text.get("signature").filter(|t| !t.trim().is_empty()) {
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Array(items)) => {
                for (n, item) in items.iter().enumerate() {
                    let s = |k: &str| item.get(k).and_then(Value::as_str).map(str::to_owned);
                    let (Some(provider), Some(proof_hash)) = (s("provider"), s("proofHash")) else {
                        errors.entry("signature").or_default().push(format!(
                            "Item {n}: `provider` and `proofHash` must be strings."
                        ));
                        continue;
                    };
                    let entry = SignatureEntry {
                        provider,
                        proof_hash,
                        signature: s("signature"),
                        public_key: s("publicKey"),
                        integrity_sha: s("integritySha"),
                    };
                    if entry
                        .signature
                        .as_deref()
                        .is_some_and(|v| !is_hex(v, true, 130))
                    {
                        errors.entry("signature").or_default().push(format!(
                            "Item {n}: `signature` must be 0x-prefixed hex of 65 bytes."
                        ));
                    }
                    if entry
                        .public_key
                        .as_deref()
                        .is_some_and(|v| !is_hex(v, true, 40))
                    {
                        errors.entry("signature").or_default().push(format!(
                            "Item {n}: `publicKey` must be a 0x-prefixed 40-hex address."
                        ));
                    }
                    if entry
                        .integrity_sha
                        .as_deref()
                        .is_some_and(|v| !is_hex(v, false, 64))
                    {
                        errors.entry("signature").or_default().push(format!(
                            "Item {n}: `integritySha` must be 64 hex characters."
                        ));
                    }
                    signature.push(entry);
                }
            }
            Ok(_) => errors
                .entry("signature")
                .or_default()
                .push("Expected a JSON array.".into()),
            Err(e) => errors
                .entry("signature")
                .or_default()
                .push(format!("Value must be valid JSON: {e}.")),
        }
    }
    if errors.is_empty() {
        Ok(Checked {
            caption,
            headline,
            meta,
            signed_metadata,
            signature,
            nit_commit_custom,
        })
    } else {
        Err(errors)
    }
}

fn sniff(bytes: &[u8]) -> &'static str {
    match bytes {
        [0xFF, 0xD8, 0xFF, ..] => "image/jpeg",
        [0x89, b'P', b'N', b'G', ..] => "image/png",
        [b'G', b'I', b'F', b'8', ..] => "image/gif",
        [_, _, _, _, b'f', b't', b'y', b'p', ..] => "video/mp4",
        [b'{' | b'[', ..] => "application/json",
        _ => "application/octet-stream",
    }
}

async fn register(reg: &Registry, form: Form) -> Response {
    let checked = match check(&form) {
        Ok(c) => c,
        Err(fields) => {
            return error(
                StatusCode::BAD_REQUEST,
                "validation_error",
                "Invalid input.",
                json!(fields),
            );
        }
    };
    let Some((file_name, declared_mime, bytes)) = form.file else {
        return error(
            StatusCode::BAD_REQUEST,
            "validation_error",
            "Invalid input.",
            json!({"asset_file": ["No file was submitted."]}),
        );
    };
    let cid = cid_v1_raw(&bytes);
    let proof_hash = sha256_hex(&bytes);
    match reg.store.exists(cid.clone()).await {
        Ok(true) => return duplicate(&cid),
        Ok(false) => {}
        Err(e) => return store_error(&e),
    }
    let mime = declared_mime
        .filter(|m| {
            m.len() <= 100
                && m.contains('/')
                && m != "application/octet-stream"
                && m.bytes().all(|b| b.is_ascii_graphic())
        })
        .unwrap_or_else(|| sniff(&bytes).to_owned());
    // Store the file first: a record never points at a missing file.
    let rel = format!("uploads/{cid}");
    let path = reg.cfg.media_dir.join(&rel);
    let tmp = reg
        .cfg
        .media_dir
        .join(format!("uploads/.{cid}.{}", uuid::Uuid::new_v4().simple()));
    let written = store_file(reg.cfg.media_dir.join("uploads"), tmp.clone(), path, &bytes).await;
    if let Err(e) = written {
        tracing::error!(error = %e, "could not store an uploaded file");
        let _ = tokio::fs::remove_file(&tmp).await;
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "storage_error",
            "The file could not be stored.",
            Value::Null,
        );
    }
    let now_us = time::OffsetDateTime::now_utc().unix_timestamp_nanos() as i64 / 1000;
    let uuid = uuid::Uuid::new_v4().to_string();
    let is_visual = mime.starts_with("image/") || mime.starts_with("video/");
    let meta = checked.meta.unwrap_or_default();
    let proof = Proof {
        hash: proof_hash.clone(),
        mime_type: mime.clone(),
        timestamp: meta
            .get("proof")
            .and_then(|p| p.get("timestamp"))
            .and_then(Value::as_i64)
            .unwrap_or(now_us / 1_000_000),
    };
    let info_items = meta
        .get("information")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|it| {
                    Some(InfoItem {
                        provider: it.get("provider")?.as_str()?.to_owned(),
                        name: it.get("name")?.as_str()?.to_owned(),
                        value: it
                            .get("value")
                            .filter(|v| v.is_string() || v.is_number())?
                            .clone(),
                    })
                })
                .collect::<Vec<_>>()
        });
    let capture_time = proof.timestamp;
    let mut l = Linker::new();
    let (email, handle, display) = UPLOADER;
    let record = AssetRecord {
        id: cid.clone(),
        uuid: uuid.clone(),
        cid: cid.clone(),
        kind: "unique".into(),
        c2pa: None,
        asset_file: l.signed(format!("/media/a/{cid}")),
        asset_file_url: String::new(),
        asset_file_name: file_name.clone(),
        asset_file_size: bytes.len() as u64,
        asset_file_mime_type: mime.clone(),
        asset_file_snapshot: is_visual.then(|| l.signed(Derived::Snapshot.path(&cid))),
        asset_file_snapshot_url: String::new(),
        asset_file_thumbnail: is_visual.then(|| l.signed(Derived::Thumbnail.path(&cid))),
        sharable_copy: None,
        image_file: None,
        image_file_url: String::new(),
        image_file_size: 0,
        image_file_mime_type: String::new(),
        supporting_file: String::new(),
        supporting_file_mime_type: String::new(),
        supporting_file_thumbnail: String::new(),
        integrity_providers: Vec::new(),
        integrity_info: Vec::new(),
        integrity_verification_hash: String::new(),
        integrity_verification_tag: String::new(),
        license: String::new(),
        proof_hash: proof_hash.clone(),
        nit_commit_custom: checked.nit_commit_custom,
        nft_spec: String::new(),
        nft_token_id: None,
        nft_token_uri: String::new(),
        nft_creation_tx_hash: String::new(),
        nft_creator_address: String::new(),
        nft_chain_id: None,
        nft_blockchain_name: String::new(),
        nft_contract_address: String::new(),
        caption: checked.caption,
        headline: checked.headline,
        tag: String::new(),
        information: Information {
            proof,
            information: info_items,
        },
        metadata_cid: (!checked.signed_metadata.is_empty())
            .then(|| cid_v1_raw(checked.signed_metadata.as_bytes())),
        signed_metadata: checked.signed_metadata,
        signature_provider: checked
            .signature
            .first()
            .map(|s| s.provider.clone())
            .unwrap_or_default(),
        signature: checked.signature,
        origin_type: "captureUpload".into(),
        digital_source_type: "digitalUpload".into(),
        service_name: "Registry API".into(),
        source_type: "original".into(),
        verification_result: String::new(),
        owner: email.into(),
        owner_name: handle.into(),
        owner_profile_display_name: display.into(),
        owner_profile_picture: l.signed(Derived::Avatar.path(handle)),
        owner_profile_picture_thumbnail: l.signed(Derived::AvatarThumbnail.path(handle)),
        owner_addresses: Addresses {
            asset_wallet_address: Some(format!("0x{}", &sha256_hex(b"wallet:api")[..40])),
            managed_wallet_address: Some(format!("0x{}", &sha256_hex(b"managed:api")[..40])),
        },
        creator: Some(email.into()),
        creator_name: Some(handle.into()),
        creator_profile_display_name: Some(display.into()),
        creator_profile_picture: Some(l.signed(Derived::Avatar.path(handle))),
        creator_profile_picture_thumbnail: Some(l.signed(Derived::AvatarThumbnail.path(handle))),
        creator_addresses: Addresses {
            asset_wallet_address: Some(format!("0x{}", &sha256_hex(b"wallet:api")[..40])),
            managed_wallet_address: Some(format!("0x{}", &sha256_hex(b"managed:api")[..40])),
        },
        is_original_owner: true,
        parent_asset: None,
        parent_asset_cid: String::new(),
        source_transaction: None,
        task_id: None,
        post_creation_workflow_id: uuid::Uuid::new_v4().to_string(),
        mint_workflow_id: None,
        search_image_samples_error: String::new(),
        create_image_sample_error: String::new(),
        preexisting: Vec::new(),
        certified_asset: None,
        certified_asset_mime_type: String::new(),
        certified_asset_thumbnail: None,
        certificate_qrcode: l.signed(Derived::QrCode.path(&cid)),
        certificate_link: l.public(format!("/verify/{cid}")),
        protected: false,
        public_access: true,
        allow_c2pa_download: false,
        published: true,
        uploaded_at: iso_micros(now_us),
        updated_at: iso_micros(now_us),
        parsed_meta: ParsedMeta {
            proof_hash: proof_hash.clone(),
            mime_type: mime.clone(),
            capture_time,
            capture_latitude: None,
            capture_longitude: None,
            capture_address: None,
            capture_device: None,
        },
    };
    let template = match Template::build(&record, l) {
        Ok(t) => t.0,
        Err(e) => {
            tracing::error!(error = %e, "could not serialise an uploaded record");
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal_error",
                "The record could not be built.",
                Value::Null,
            );
        }
    };
    let new = NewAsset {
        cid: cid.clone(),
        uuid,
        uploaded_us: now_us,
        source: FileSource::Stored(rel),
        file_name,
        mime,
        size: bytes.len() as u64,
        proof_hash,
        template: template.clone(),
    };
    let id = match reg.store.insert(new).await {
        Ok(id) => id,
        Err(StoreError::Conflict(_)) => return duplicate(&cid),
        Err(e) if e.is_unique_violation() => return duplicate(&cid),
        Err(e) => return store_error(&e),
    };
    tracing::info!(%cid, "registered an uploaded asset");
    let body = match render_one(reg, id, &template) {
        Ok(b) => b,
        Err(r) => return r,
    };
    (
        StatusCode::CREATED,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// Write `bytes` to `tmp`, flush them to disk, rename to `path` and flush the directory: the record that
/// points at the file is committed with `synchronous = FULL` right after, so the file must be as durable.
async fn store_file(
    dir: std::path::PathBuf,
    tmp: std::path::PathBuf,
    path: std::path::PathBuf,
    bytes: &[u8],
) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt as _;
    tokio::fs::create_dir_all(&dir).await?;
    let mut file = tokio::fs::File::create(&tmp).await?;
    file.write_all(bytes).await?;
    file.sync_all().await?;
    drop(file);
    tokio::fs::rename(&tmp, &path).await?;
    #[cfg(unix)]
    tokio::task::spawn_blocking(move || std::fs::File::open(&dir)?.sync_all())
        .await
        .map_err(std::io::Error::other)??;
    Ok(())
}

fn duplicate(cid: &str) -> Response {
    error(
        StatusCode::CONFLICT,
        "duplicate_asset",
        "An asset with the same file content is already registered.",
        json!({"cid": cid}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(fields: &[(&'static str, &str)]) -> Form {
        let mut f = Form {
            file: Some(("a.jpg".into(), None, vec![1, 2, 3])),
            ..Form::default()
        };
        for (k, v) in fields {
            f.text.insert(k, (*v).to_owned());
        }
        f
    }

    #[test]
    fn valid_fields_pass_and_empty_json_fields_mean_absent() {
        let ok = check(&form(&[
            ("headline", "exactly twenty-five chars"),
            ("meta", ""),
            ("signed_metadata", r#"{"spec_version":"2.0.0"}"#),
            (
                "signature",
                r#"[{"provider":"p","proofHash":"h","publicKey":"0x00000000000000000000000000000000000000aa"}]"#,
            ),
            ("nit_commit_custom", "{}"),
        ]))
        .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(ok.headline.chars().count(), 25);
        assert!(ok.meta.is_none());
        assert_eq!(ok.signed_metadata, r#"{"spec_version":"2.0.0"}"#);
        assert_eq!(ok.signature.len(), 1);
    }

    #[test]
    fn signed_metadata_is_stored_byte_for_byte() {
        let sent =
            "{\"spec_version\": \"2.0.0\",\n \"created_at\": 1.50e3, \"caption\": \"caf\\u00e9\"}";
        let ok = check(&form(&[("signed_metadata", sent)])).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(ok.signed_metadata, sent);
    }

    #[test]
    fn every_bad_field_is_named() {
        let mut f = form(&[
            ("headline", "twenty-six characters long"),
            ("meta", "[]"),
            ("signed_metadata", "{oops"),
            (
                "signature",
                r#"[{"provider":"p","proofHash":"h","signature":"0x12"}]"#,
            ),
            ("nit_commit_custom", "\"text\""),
        ]);
        f.file = None;
        let errors = check(&f).err().unwrap_or_default();
        let names: Vec<&str> = errors.keys().copied().collect();
        assert_eq!(
            names,
            [
                "asset_file",
                "headline",
                "meta",
                "nit_commit_custom",
                "signature",
                "signed_metadata"
            ]
        );
    }

    #[test]
    fn token_comparison_and_sniffing() {
        assert_eq!(sniff(&[0xFF, 0xD8, 0xFF, 0xE0]), "image/jpeg");
        assert_eq!(sniff(b"\x89PNG\r\n"), "image/png");
        assert_eq!(sniff(b"{}"), "application/json");
        assert_eq!(sniff(b"zz"), "application/octet-stream");
    }
}
