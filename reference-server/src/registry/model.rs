//! The asset record of interfaces.md part B, and its stored form: a pre-serialised JSON template whose
//! file URLs are holes filled per request.
//!
//! Field order follows the tables of interfaces.md. Every field is always present; absent values use the
//! convention the table states for that field (`""`, `0`, `[]`, `{}` or `null`).

use serde::Serialize;
use serde_json::{Map, Value};

/// An absolute URL in a record that depends on the request: either signed (`asset_file`...) or only
/// prefixed with the public base URL (`certificate_link`). Serialises as a marker that
/// [`Template::build`] turns into a hole.
#[derive(Debug, Clone, Serialize)]
#[serde(transparent)]
pub struct Link(String);

impl utoipa::PartialSchema for Link {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .format(Some(utoipa::openapi::schema::SchemaFormat::Custom(
                "uri".to_owned(),
            )))
            .description(Some("An absolute URL; media links are signed and expire."))
            .into()
    }
}

impl utoipa::ToSchema for Link {}

/// Collects the links of one record while it is built.
#[derive(Debug)]
pub struct Linker {
    nonce: String,
    holes: Vec<(HoleKind, String)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HoleKind {
    Signed = 1,
    Public = 2,
}

impl Default for Linker {
    fn default() -> Self {
        Self::new()
    }
}

impl Linker {
    /// A linker with a fresh unguessable marker (user text cannot forge a hole).
    pub fn new() -> Self {
        Self {
            nonce: format!("\u{e000}{}:", uuid::Uuid::new_v4().simple()),
            holes: Vec::new(),
        }
    }

    fn link(&mut self, kind: HoleKind, path: String) -> Link {
        debug_assert!(
            path.bytes()
                .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
        );
        let marker = format!("{}{}", self.nonce, self.holes.len());
        self.holes.push((kind, path));
        Link(marker)
    }

    /// A signed, time-limited URL of a media path (`/media/...`).
    pub fn signed(&mut self, path: String) -> Link {
        self.link(HoleKind::Signed, path)
    }

    /// `<public base URL><path>`, unsigned.
    pub fn public(&mut self, path: String) -> Link {
        self.link(HoleKind::Public, path)
    }
}

/// A record serialised once, with holes for the per-request URLs.
///
/// Encoding: a sequence of `tag: u8, len: u32 LE, bytes` items; tag 0 = literal JSON, 1 = signed media
/// path, 2 = public path. Rendering is a linear copy plus one (cached) signature per signed hole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(pub Vec<u8>);

/// Errors building or rendering a template.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// The record could not be serialised.
    #[error("serialising the record: {0}")]
    Json(#[from] serde_json::Error),
    /// A stored template is truncated or malformed.
    #[error("corrupt stored template")]
    Corrupt,
}

impl Template {
    /// Serialise `record` and cut its link markers into holes.
    pub fn build(record: &AssetRecord, linker: Linker) -> Result<Self, TemplateError> {
        let json = serde_json::to_string(record)?;
        let mut out = Vec::with_capacity(json.len() + linker.holes.len() * 8);
        let mut rest = json.as_str();
        while let Some(at) = rest.find(&linker.nonce) {
            push_item(&mut out, 0, &rest.as_bytes()[..at]);
            let after = &rest[at + linker.nonce.len()..];
            let digits = after.bytes().take_while(u8::is_ascii_digit).count();
            let idx: usize = after[..digits]
                .parse()
                .map_err(|_| TemplateError::Corrupt)?;
            let (kind, path) = linker.holes.get(idx).ok_or(TemplateError::Corrupt)?;
            push_item(&mut out, *kind as u8, path.as_bytes());
            rest = &after[digits..];
        }
        push_item(&mut out, 0, rest.as_bytes());
        Ok(Self(out))
    }

    /// Append the record's JSON to `out`, with `base` before every path and `signer` writing the query
    /// string of every signed hole (`idx` counts signed holes from 0).
    pub fn render(
        bytes: &[u8],
        out: &mut Vec<u8>,
        base: &str,
        signer: &mut impl HoleSigner,
    ) -> Result<(), TemplateError> {
        let mut rest = bytes;
        let mut idx = 0;
        while !rest.is_empty() {
            if rest.len() < 5 {
                return Err(TemplateError::Corrupt);
            }
            let tag = rest[0];
            let len = u32::from_le_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
            let item = rest.get(5..5 + len).ok_or(TemplateError::Corrupt)?;
            rest = &rest[5 + len..];
            match tag {
                0 => out.extend_from_slice(item),
                1 | 2 => {
                    out.extend_from_slice(base.as_bytes());
                    out.extend_from_slice(item);
                    if tag == 1 {
                        signer.write_signed(out, idx, item);
                        idx += 1;
                    }
                }
                _ => return Err(TemplateError::Corrupt),
            }
        }
        Ok(())
    }
}

/// Writes the query string (`?Expires=..&Signature=..&Key-Pair-Id=..`) of a signed hole.
pub trait HoleSigner {
    /// Append the query string of signed hole number `idx`, whose path is `path`, to `out`.
    fn write_signed(&mut self, out: &mut Vec<u8>, idx: usize, path: &[u8]);
}

fn push_item(out: &mut Vec<u8>, tag: u8, bytes: &[u8]) {
    if tag == 0 && bytes.is_empty() {
        return;
    }
    out.push(tag);
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// One registry asset, field for field as interfaces.md part B lists them.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[allow(missing_docs)]
pub struct AssetRecord {
    // Identity and file
    pub id: String,
    pub uuid: String,
    pub cid: String,
    #[serde(rename = "type")]
    pub kind: String,
    #[schema(required = true)]
    pub c2pa: Option<bool>,
    pub asset_file: Link,
    pub asset_file_url: String,
    pub asset_file_name: String,
    pub asset_file_size: u64,
    pub asset_file_mime_type: String,
    #[schema(required = true)]
    pub asset_file_snapshot: Option<Link>,
    pub asset_file_snapshot_url: String,
    #[schema(required = true)]
    pub asset_file_thumbnail: Option<Link>,
    #[schema(required = true)]
    pub sharable_copy: Option<Link>,
    #[schema(required = true)]
    pub image_file: Option<String>,
    pub image_file_url: String,
    pub image_file_size: u64,
    pub image_file_mime_type: String,
    pub supporting_file: String,
    pub supporting_file_mime_type: String,
    pub supporting_file_thumbnail: String,
    // Integrity
    pub integrity_providers: Vec<String>,
    pub integrity_info: Vec<IntegrityInfo>,
    pub integrity_verification_hash: String,
    pub integrity_verification_tag: String,
    pub license: String,
    pub proof_hash: String,
    pub nit_commit_custom: Map<String, Value>,
    // NFT
    pub nft_spec: String,
    #[schema(required = true)]
    pub nft_token_id: Option<String>,
    pub nft_token_uri: String,
    pub nft_creation_tx_hash: String,
    pub nft_creator_address: String,
    #[schema(required = true)]
    pub nft_chain_id: Option<i64>,
    pub nft_blockchain_name: String,
    pub nft_contract_address: String,
    // Descriptive and metadata
    pub caption: String,
    pub headline: String,
    pub tag: String,
    pub information: Information,
    pub signed_metadata: String,
    #[schema(required = true)]
    pub metadata_cid: Option<String>,
    pub signature: Vec<SignatureEntry>,
    pub signature_provider: String,
    pub origin_type: String,
    pub digital_source_type: String,
    pub service_name: String,
    pub source_type: String,
    pub verification_result: String,
    // Owner and creator
    pub owner: String,
    pub owner_name: String,
    pub owner_profile_display_name: String,
    pub owner_profile_picture: Link,
    pub owner_profile_picture_thumbnail: Link,
    pub owner_addresses: Addresses,
    #[schema(required = true)]
    pub creator: Option<String>,
    #[schema(required = true)]
    pub creator_name: Option<String>,
    #[schema(required = true)]
    pub creator_profile_display_name: Option<String>,
    #[schema(required = true)]
    pub creator_profile_picture: Option<Link>,
    #[schema(required = true)]
    pub creator_profile_picture_thumbnail: Option<Link>,
    pub creator_addresses: Addresses,
    pub is_original_owner: bool,
    // Lineage and transactions
    #[schema(required = true)]
    pub parent_asset: Option<String>,
    pub parent_asset_cid: String,
    #[schema(required = true)]
    pub source_transaction: Option<SourceTransaction>,
    #[schema(required = true)]
    pub task_id: Option<String>,
    pub post_creation_workflow_id: String,
    #[schema(required = true)]
    pub mint_workflow_id: Option<String>,
    pub search_image_samples_error: String,
    pub create_image_sample_error: String,
    pub preexisting: Vec<Preexisting>,
    // Certificate and flags
    #[schema(required = true)]
    pub certified_asset: Option<Link>,
    pub certified_asset_mime_type: String,
    #[schema(required = true)]
    pub certified_asset_thumbnail: Option<Link>,
    pub certificate_qrcode: Link,
    pub certificate_link: Link,
    pub protected: bool,
    pub public_access: bool,
    pub allow_c2pa_download: bool,
    pub published: bool,
    pub uploaded_at: String,
    pub updated_at: String,
    pub parsed_meta: ParsedMeta,
}

/// `integrity_info[]`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[allow(missing_docs)]
pub struct IntegrityInfo {
    pub integrity_provider: String,
    pub search_id: String,
    pub search_index: String,
    pub explorer_url: String,
    pub created_at: String,
}

/// `information`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[allow(missing_docs)]
pub struct Information {
    pub proof: Proof,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub information: Option<Vec<InfoItem>>,
}

/// `information.proof`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[allow(missing_docs)]
pub struct Proof {
    pub hash: String,
    #[serde(rename = "mimeType")]
    pub mime_type: String,
    pub timestamp: i64,
}

/// `information.information[]`: `value` is a string or a number.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[allow(missing_docs)]
pub struct InfoItem {
    pub provider: String,
    pub name: String,
    pub value: Value,
}

/// `signature[]`: `signature`, `publicKey` and `integritySha` are optional keys.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[allow(missing_docs)]
pub struct SignatureEntry {
    pub provider: String,
    #[serde(rename = "proofHash")]
    pub proof_hash: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    #[serde(rename = "publicKey", skip_serializing_if = "Option::is_none")]
    pub public_key: Option<String>,
    #[serde(rename = "integritySha", skip_serializing_if = "Option::is_none")]
    pub integrity_sha: Option<String>,
}

/// `owner_addresses` / `creator_addresses`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[allow(missing_docs)]
pub struct Addresses {
    #[schema(required = true)]
    pub asset_wallet_address: Option<String>,
    #[schema(required = true)]
    pub managed_wallet_address: Option<String>,
}

/// `source_transaction` (non-null for `source_type` = `store`).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[allow(missing_docs)]
pub struct SourceTransaction {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub sender: String,
    pub sender_name: String,
    pub receiver_email: String,
    pub receiver_address: String,
    pub receiver_name: String,
    pub checkout_order_id: String,
    pub created_at: String,
    pub fulfilled_at: String,
    pub expired_at: String,
    pub expired: bool,
}

/// `preexisting[]`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[allow(missing_docs)]
pub struct Preexisting {
    pub id: String,
    pub asset: String,
    pub preexisting: String,
    pub created_at: String,
    pub updated_at: String,
}

/// `parsed_meta`: the capture keys are optional.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[allow(missing_docs)]
pub struct ParsedMeta {
    pub proof_hash: String,
    pub mime_type: String,
    pub capture_time: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capture_latitude: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capture_longitude: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capture_address: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capture_device: Option<String>,
}

/// ISO 8601 UTC with microseconds and `Z`, from Unix microseconds.
pub fn iso_micros(us: i64) -> String {
    let secs = us.div_euclid(1_000_000);
    let micros = us.rem_euclid(1_000_000);
    let dt =
        time::OffsetDateTime::from_unix_timestamp(secs).unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        dt.year(),
        u8::from(dt.month()),
        dt.day(),
        dt.hour(),
        dt.minute(),
        dt.second(),
        micros
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_format() {
        assert_eq!(
            iso_micros(1_700_000_000_123_456),
            "2023-11-14T22:13:20.123456Z"
        );
        assert_eq!(iso_micros(0), "1970-01-01T00:00:00.000000Z");
    }

    #[test]
    fn template_holes_round_trip() {
        #[derive(Serialize)]
        struct T {
            a: Link,
            b: String,
            c: Option<Link>,
        }
        let mut l = Linker::new();
        let t = T {
            a: l.signed("/media/x".into()),
            b: "\u{e000}0".into(),
            c: Some(l.public("/v/y".into())),
        };
        let json = serde_json::to_string(&t).unwrap();
        let nonce = l.nonce.clone();
        let holes = l.holes.clone();
        let mut out = Vec::new();
        let mut rest = json.as_str();
        // same algorithm as Template::build, via a fake record is heavy: check the pieces instead
        while let Some(at) = rest.find(&nonce) {
            out.extend_from_slice(&rest.as_bytes()[..at]);
            let after = &rest[at + nonce.len()..];
            let d = after.bytes().take_while(u8::is_ascii_digit).count();
            let i: usize = after[..d].parse().unwrap();
            out.extend_from_slice(holes[i].1.as_bytes());
            rest = &after[d..];
        }
        out.extend_from_slice(rest.as_bytes());
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"a\":\"/media/x\",\"b\":\"\u{e000}0\",\"c\":\"/v/y\"}"
        );
    }
}
