//! Deterministic demo catalog: asset `i` of a seed is a pure function of `i` (and of the seed size, which
//! spreads the upload times), so two servers seeded with the same `N` list byte-identical records apart
//! from the per-request signed URLs.
//!
//! Coverage (by index arithmetic, so every seed of 20 or more assets has all of them): both `type`s,
//! the three integrity providers (`nit`, `iota_legacy`, `iota_chrysalis`) and records without any,
//! the four signature shapes (full, with `integritySha`, without signature/publicKey, `[]`), minted and
//! unminted NFTs, `store` records with a `source_transaction`, captions with newlines, `signed_metadata`
//! documents (`spec_version` `2.0.0`) and `""`, legacy proof hashes with a leading space, creators null,
//! ties on `uploaded_at` (broken by id).
//!
//! The cryptographic-looking values that are not content hashes (transaction hashes, signatures,
//! addresses) are derived from SHA-256 of labels: well-formed, not verifiable on any chain.

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::media;
use super::model::*;
use crate::store::assets::{FileSource, NewAsset};

/// Upload time of the oldest seeded asset: 2022-01-01T00:00:00Z.
const SEED_START_US: i64 = 1_640_995_200_000_000;
/// Upload time of the newest seeded asset: 2025-06-30T00:00:00Z.
const SEED_END_US: i64 = 1_751_241_600_000_000;

struct Account {
    email: &'static str,
    handle: &'static str,
    display: &'static str,
}

const ACCOUNTS: &[Account] = &[
    Account {
        email: "ada.lovelace@example.org",
        handle: "ada",
        display: "Ada Lovelace",
    },
    Account {
        email: "grace.hopper@example.org",
        handle: "grace_h",
        display: "Grace Hopper",
    },
    Account {
        email: "newsdesk@dailyledger.example",
        handle: "dailyledger",
        display: "The Daily Ledger",
    },
    Account {
        email: "photo@field-reports.example",
        handle: "fieldreports",
        display: "Field Reports",
    },
    Account {
        email: "kenji.sato@example.net",
        handle: "kenji",
        display: "Kenji Sato",
    },
    Account {
        email: "amara.okafor@example.net",
        handle: "amara_o",
        display: "Amara Okafor",
    },
    Account {
        email: "lucia.mendes@example.com",
        handle: "lucia",
        display: "Lúcia Mendes",
    },
    Account {
        email: "archive@museum.example",
        handle: "citymuseum",
        display: "City Museum Archive",
    },
    Account {
        email: "noor.haddad@example.com",
        handle: "noorh",
        display: "Noor Haddad",
    },
    Account {
        email: "tom.becker@example.de",
        handle: "tbecker",
        display: "Tom Becker",
    },
    Account {
        email: "wei.zhang@example.cn",
        handle: "weizhang",
        display: "張偉",
    },
    Account {
        email: "studio@pixelforge.example",
        handle: "pixelforge",
        display: "PixelForge Studio",
    },
];

const CAPTIONS: &[&str] = &[
    "Morning light over the harbour",
    "Flood waters reaching the market street.\nTaken from the second floor of the pharmacy.",
    "Protest march, main square",
    "Receipt of the council meeting minutes, scanned for the archive",
    "Wildfire smoke seen from the ridge trail.\nWind from the north-west.\nVisibility under 500 m.",
    "Product shot #12 — spring collection",
    "",
    "Street food vendors at the night market",
    "Election day: queue outside polling station 14",
    "Original scan of a 1952 family photograph, restored colours",
];

const LONG_CAPTION: &str = "Field notes. This capture documents the state of the river embankment after three days of \
continuous rain. The photographer walked the full length of the eastern bank between the old mill and the rail \
bridge, recording cracks in the retaining wall, debris lines, and the height reached by the water on the \
marker posts.\n\nAll images were captured with the registration app, which seals the device time, location and \
a hash of the pixels at the moment of capture, so later edits can be detected.\n\nContact the newsdesk before \
republishing.";

const HEADLINES: &[&str] = &[
    "Harbour sunrise",
    "Flooded market",
    "March for rights",
    "Council minutes",
    "Ridge fire",
    "",
    "Night market",
    "Polling queue",
];

const PLACES: &[(f64, f64, &str)] = &[
    (
        25.033_964,
        121.564_472,
        "Xinyi District, Taipei City, Taiwan",
    ),
    (
        51.507_351,
        -0.127_758,
        "Westminster, London, United Kingdom",
    ),
    (-23.550_520, -46.633_308, "Sé, São Paulo, Brazil"),
    (6.524_379, 3.379_206, "Lagos Island, Lagos, Nigeria"),
    (48.856_614, 2.352_222, "4th arrondissement, Paris, France"),
];

/// splitmix64: a tiny deterministic generator per asset.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn h(label: &str) -> [u8; 32] {
    Sha256::digest(label.as_bytes()).into()
}
fn hex32(label: &str) -> String {
    hex::encode(h(label))
}
fn tx_hash(label: &str) -> String {
    format!("0x{}", hex32(label))
}
fn address(label: &str) -> String {
    format!("0x{}", &hex32(label)[..40])
}
fn uuid_of(label: &str) -> String {
    uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_URL, label.as_bytes()).to_string()
}
fn trytes(label: &str, len: usize) -> String {
    const T: &[u8] = b"9ABCDEFGHIJKLMNOPQRSTUVWXYZ";
    let mut out = String::with_capacity(len);
    let mut block = h(label);
    while out.len() < len {
        for b in block {
            if out.len() == len {
                break;
            }
            out.push(T[(b % 27) as usize] as char);
        }
        block = Sha256::digest(block).into();
    }
    out
}

/// MIME type and file name of seed asset `i`.
fn seed_kind(i: u64) -> (&'static str, &'static str) {
    match i % 20 {
        0..=10 => ("image/jpeg", "jpg"),
        11..=14 => ("image/png", "png"),
        15..=17 => ("application/json", "json"),
        _ => ("video/mp4", "mp4"),
    }
}

/// The file bytes of seed asset `i` (regenerated by the media endpoint).
pub fn seed_file(i: u64) -> (&'static str, Vec<u8>) {
    let (mime, _) = seed_kind(i);
    let label = format!("reference-server seed asset {i}");
    let bytes = match mime {
        "image/jpeg" => media::jpeg(&label),
        "image/png" => media::png(&label, 16),
        "application/json" => serde_json::to_vec(&json!({
            "title": format!("Provenance document {i}"),
            "items": [i, i * 2, i * 3],
            "note": label,
        }))
        .unwrap_or_default(),
        _ => media::mp4(&label),
    };
    (mime, bytes)
}

fn seed_cid(i: u64) -> String {
    media::cid_v1_raw(&seed_file(i).1)
}

/// Upload time of seed asset `i` of `n`: evenly spread over [`SEED_START_US`, `SEED_END_US`] with jitter;
/// every 17th asset shares its predecessor's time (a tie broken by id).
fn seed_uploaded_us(i: u64, n: u64) -> i64 {
    let slot = |i: u64| {
        let step = (SEED_END_US - SEED_START_US) / n.max(1) as i64;
        let jitter = (Rng(i).next() % (step.max(2) as u64 / 2)) as i64;
        SEED_START_US + step * i as i64 + jitter
    };
    if i > 0 && i.is_multiple_of(17) {
        slot(i - 1)
    } else {
        slot(i)
    }
}

/// Build seed asset `i` of `n`.
pub fn seed_asset(i: u64, n: u64) -> Result<NewAsset, TemplateError> {
    let mut rng = Rng(i ^ 0x5EED);
    let (mime, bytes) = seed_file(i);
    let ext = seed_kind(i).1;
    let cid = media::cid_v1_raw(&bytes);
    let proof_hash = media::sha256_hex(&bytes);
    let uploaded_us = seed_uploaded_us(i, n);
    let captured_s = uploaded_us / 1_000_000 - rng.below(86_400 * 3) as i64;
    let updated_us =
        uploaded_us + (rng.below(3) as i64) * 3_600_000_000 + rng.below(1_000_000) as i64;
    let is_image = mime.starts_with("image/");
    let is_visual = is_image || mime.starts_with("video/");
    let owner = &ACCOUNTS[(i % ACCOUNTS.len() as u64) as usize];
    let store = i % 13 == 5;
    let creator_null = !store && i % 10 == 3;
    let creator = if store {
        &ACCOUNTS[((i + 5) % ACCOUNTS.len() as u64) as usize]
    } else {
        owner
    };
    let minted = i.is_multiple_of(4);
    let place = PLACES[(i % PLACES.len() as u64) as usize];
    let captured = i % 3 != 2 && is_visual;
    let uuid = uuid_of(&format!("asset:{i}"));

    // Integrity record(s).
    let provider = match i % 10 {
        0..=5 => Some("nit"),
        6 => Some("iota_legacy"),
        7 => Some("iota_chrysalis"),
        8 => Some("both"),
        _ => None,
    };
    let at = iso_micros(uploaded_us + 4_000_000);
    let nit = || IntegrityInfo {
        integrity_provider: "nit".into(),
        search_id: tx_hash(&format!("nit:{cid}")),
        search_index: cid.clone(),
        explorer_url: format!(
            "https://mainnet.num.network/tx/{}",
            tx_hash(&format!("nit:{cid}"))
        ),
        created_at: at.clone(),
    };
    let legacy_id = trytes(&format!("legacy:{cid}"), 81);
    let legacy_tag = "CAPTURE9PROOF9LEGACY9999999".to_string();
    let (mut integrity_info, mut verification_hash, mut verification_tag, legacy) = (
        Vec::new(),
        String::new(),
        String::new(),
        matches!(provider, Some("iota_legacy")),
    );
    match provider {
        Some("nit") => integrity_info.push(nit()),
        Some("iota_legacy") => {
            integrity_info.push(IntegrityInfo {
                integrity_provider: "iota_legacy".into(),
                search_id: legacy_id.clone(),
                search_index: legacy_tag.clone(),
                explorer_url: format!(
                    "https://explorer.iota.org/legacy-mainnet/transaction/{legacy_id}"
                ),
                created_at: at.clone(),
            });
            verification_hash = legacy_id;
            verification_tag = legacy_tag;
        }
        Some("iota_chrysalis") => {
            let msg = hex32(&format!("chrysalis:{cid}"));
            integrity_info.push(IntegrityInfo {
                integrity_provider: "iota_chrysalis".into(),
                search_id: msg.clone(),
                search_index: "numbers-protocol".into(),
                explorer_url: format!("https://explorer.iota.org/mainnet/message/{msg}"),
                created_at: at.clone(),
            });
        }
        Some(_) => {
            let msg = hex32(&format!("chrysalis:{cid}"));
            integrity_info.push(IntegrityInfo {
                integrity_provider: "iota_chrysalis".into(),
                search_id: msg.clone(),
                search_index: "numbers-protocol".into(),
                explorer_url: format!("https://explorer.iota.org/mainnet/message/{msg}"),
                created_at: iso_micros(uploaded_us + 2_000_000),
            });
            integrity_info.push(nit());
        }
        None => {}
    }
    let mut integrity_providers: Vec<String> = Vec::new();
    for info in &integrity_info {
        if !integrity_providers.contains(&info.integrity_provider) {
            integrity_providers.push(info.integrity_provider.clone());
        }
    }

    let caption = if i % 29 == 7 {
        LONG_CAPTION.to_string()
    } else {
        CAPTIONS[(i % CAPTIONS.len() as u64) as usize].to_string()
    };
    let headline = HEADLINES[(i % HEADLINES.len() as u64) as usize].to_string();
    let (origin_type, digital_source_type, service_name) = match i % 6 {
        0 | 1 => ("captureCamera", "digitalCapture", "Capture App"),
        2 => ("captureUpload", "digitalUpload", "Capture App"),
        3 => ("others", "", ""),
        4 => ("Capture Cam", "digitalCapture", "Capture Cam"),
        _ => ("Collections", "digitalUpload", "Collections Dashboard"),
    };

    let info_items = captured.then(|| {
        vec![
            item("Capture", "Capture App", "Capture App"),
            item("Capture", "App Version", "2.18.0"),
            InfoItem {
                provider: "Capture".into(),
                name: "Battery Level".into(),
                value: json!(0.42 + (i % 50) as f64 / 100.0),
            },
            item("Capture", "Disk", &format!("{} GB free", 12 + i % 90)),
            item("Capture", "Memory", &format!("{} MB", 2048 + (i % 8) * 512)),
            item(
                "Capture",
                "Platform",
                if i.is_multiple_of(2) {
                    "Android 14"
                } else {
                    "iOS 17.5"
                },
            ),
            InfoItem {
                provider: "Capture".into(),
                name: "Current GPS Latitude".into(),
                value: json!(place.0),
            },
            InfoItem {
                provider: "Capture".into(),
                name: "Current GPS Longitude".into(),
                value: json!(place.1),
            },
            item("Capture", "Current Address", place.2),
            InfoItem {
                provider: "Capture".into(),
                name: "Timestamp".into(),
                value: json!(captured_s),
            },
        ]
    });
    let device = if i.is_multiple_of(2) {
        "Pixel 8"
    } else {
        "iPhone 15"
    };
    let signed_metadata = if i % 8 == 6 {
        String::new()
    } else {
        let mut doc = Map::new();
        doc.insert("asset_mime_type".into(), json!(mime));
        doc.insert("caption".into(), json!(caption));
        // Seconds in some records, milliseconds in others, as observed.
        doc.insert(
            "created_at".into(),
            if i.is_multiple_of(2) {
                json!(captured_s)
            } else {
                json!(captured_s * 1000)
            },
        );
        doc.insert("device_name".into(), json!(device));
        doc.insert(
            "information".into(),
            json!({"device": device, "os": if i.is_multiple_of(2) { "Android 14" } else { "iOS 17.5" }}),
        );
        doc.insert("location_latitude".into(), json!(place.0));
        doc.insert("location_longitude".into(), json!(place.1));
        doc.insert("proof_hash".into(), json!(proof_hash));
        doc.insert("recorder".into(), json!("Capture"));
        doc.insert("spec_version".into(), json!("2.0.0"));
        doc.insert("app_version".into(), json!("2.18.0"));
        doc.insert("metadata_schema_version".into(), json!("v1.1.0"));
        doc.insert(
            "visible_overlays_applied".into(),
            json!(i.is_multiple_of(5)),
        );
        if origin_type == "others" {
            doc.insert(
                "web_source_title".into(),
                json!(format!("Archive page {i}")),
            );
            doc.insert(
                "web_source_url".into(),
                json!(format!("https://archive.example.org/items/{i}")),
            );
        }
        serde_json::to_string(&doc).unwrap_or_default()
    };
    let metadata_cid =
        (!signed_metadata.is_empty()).then(|| media::cid_v1_raw(signed_metadata.as_bytes()));

    let signer_addr = address(&format!("signer:{}", owner.handle));
    let signature = match i % 4 {
        0 => vec![SignatureEntry {
            provider: "AssetSignature".into(),
            proof_hash: proof_hash.clone(),
            signature: Some(format!(
                "0x{}{}{}",
                hex32(&format!("r:{cid}")),
                hex32(&format!("s:{cid}")),
                if i.is_multiple_of(8) { "1b" } else { "1c" }
            )),
            public_key: Some(signer_addr.clone()),
            integrity_sha: None,
        }],
        1 => vec![SignatureEntry {
            provider: "AssetSignature".into(),
            proof_hash: proof_hash.clone(),
            signature: Some(format!(
                "0x{}{}1b",
                hex32(&format!("r:{cid}")),
                hex32(&format!("s:{cid}"))
            )),
            public_key: Some(signer_addr.clone()),
            integrity_sha: Some(hex32(&format!("integrity:{cid}"))),
        }],
        2 => vec![SignatureEntry {
            provider: "UploaderSignature".into(),
            proof_hash: proof_hash.clone(),
            signature: None,
            public_key: None,
            integrity_sha: None,
        }],
        _ => Vec::new(),
    };
    let signature_provider = if signature.is_empty() {
        ""
    } else if i % 4 == 2 {
        "Collections Dashboard"
    } else {
        "Capture App"
    };

    let mut nit_commit_custom = Map::new();
    if i.is_multiple_of(3) {
        nit_commit_custom.insert(
            "usedBy".into(),
            Value::String(format!("https://dailyledger.example/stories/{i}")),
        );
    }
    if i % 4 == 1 {
        nit_commit_custom.insert(
            "assetSourceType".into(),
            json!(if store { "store" } else { "original" }),
        );
    }
    if i % 5 == 2 {
        nit_commit_custom.insert(
            "digitalSourceType".into(),
            json!(if digital_source_type.is_empty() {
                "digitalCapture"
            } else {
                digital_source_type
            }),
        );
    }

    let chain = [(10_507, "numbers"), (137, "polygon"), (8_453, "base")][(i % 3) as usize];
    let child = i % 7 == 3 && i > 0;
    let preexisting = if i % 23 == 11 && i > 0 {
        let earlier = seed_cid(i - 1);
        vec![Preexisting {
            id: uuid_of(&format!("preexisting:{i}")),
            asset: cid.clone(),
            preexisting: earlier,
            created_at: iso_micros(uploaded_us + 9_000_000),
            updated_at: iso_micros(uploaded_us + 9_000_000),
        }]
    } else {
        Vec::new()
    };

    let mut l = Linker::new();
    let record = AssetRecord {
        id: cid.clone(),
        uuid: uuid.clone(),
        cid: cid.clone(),
        kind: if child { "child" } else { "unique" }.into(),
        c2pa: match i % 3 {
            0 => Some(true),
            1 => Some(false),
            _ => None,
        },
        asset_file: l.signed(format!("/media/a/{cid}")),
        asset_file_url: if provider.is_some() {
            format!("ipfs://{cid}")
        } else {
            String::new()
        },
        asset_file_name: match ext {
            "jpg" => format!("IMG_{}_{:06}.jpg", 20220101 + i % 1000, i),
            "png" => format!("capture-{i}.png"),
            "json" => format!("document-{i}.json"),
            _ => format!("VID_{:06}.mp4", i),
        },
        asset_file_size: bytes.len() as u64,
        asset_file_mime_type: mime.into(),
        asset_file_snapshot: is_visual.then(|| l.signed(media::Derived::Snapshot.path(&cid))),
        asset_file_snapshot_url: if is_visual && provider.is_some() {
            format!(
                "ipfs://{}",
                media::cid_v1_raw(&media::jpeg(&format!("snapshot:{cid}")))
            )
        } else {
            String::new()
        },
        asset_file_thumbnail: is_visual.then(|| l.signed(media::Derived::Thumbnail.path(&cid))),
        sharable_copy: (is_image && i.is_multiple_of(2))
            .then(|| l.signed(media::Derived::SharableCopy.path(&cid))),
        image_file: None,
        image_file_url: String::new(),
        image_file_size: 0,
        image_file_mime_type: String::new(),
        supporting_file: if i % 9 == 4 {
            format!(
                "https://ipfs-pin.numbersprotocol.io/ipfs/{}",
                seed_cid(i + 1_000_000)
            )
        } else {
            String::new()
        },
        supporting_file_mime_type: if i % 9 == 4 {
            "image/jpeg".into()
        } else {
            String::new()
        },
        supporting_file_thumbnail: String::new(),
        integrity_providers,
        integrity_info,
        integrity_verification_hash: verification_hash,
        integrity_verification_tag: verification_tag,
        license: ["", "CC-BY-NC-ND-4.0", "CC-BY-4.0", "", "CC0-1.0"][(i % 5) as usize].into(),
        proof_hash: proof_hash.clone(),
        nit_commit_custom,
        nft_spec: if minted {
            "erc721".into()
        } else {
            String::new()
        },
        nft_token_id: minted.then(|| (1000 + i / 4).to_string()),
        nft_token_uri: if minted {
            format!(
                "ipfs://{}",
                media::cid_v1_raw(format!("nft-metadata:{cid}").as_bytes())
            )
        } else {
            String::new()
        },
        nft_creation_tx_hash: if minted {
            tx_hash(&format!("mint:{cid}"))
        } else {
            String::new()
        },
        nft_creator_address: if minted {
            address(&format!("wallet:{}", creator.handle))
        } else {
            String::new()
        },
        nft_chain_id: minted.then_some(chain.0),
        nft_blockchain_name: if minted {
            chain.1.into()
        } else {
            String::new()
        },
        nft_contract_address: if minted {
            address(&format!("contract:{}", chain.1))
        } else {
            String::new()
        },
        caption: caption.clone(),
        headline,
        tag: String::new(),
        information: Information {
            proof: Proof {
                // Legacy registrations stored the hash with a leading space.
                hash: if legacy {
                    format!(" {proof_hash}")
                } else {
                    proof_hash.clone()
                },
                mime_type: mime.into(),
                timestamp: captured_s,
            },
            information: info_items,
        },
        signed_metadata,
        metadata_cid,
        signature,
        signature_provider: signature_provider.into(),
        origin_type: origin_type.into(),
        digital_source_type: digital_source_type.into(),
        service_name: service_name.into(),
        source_type: if store { "store" } else { "original" }.into(),
        verification_result: if provider.is_some() && i.is_multiple_of(2) {
            "advanced"
        } else {
            ""
        }
        .into(),
        owner: owner.email.into(),
        owner_name: owner.handle.into(),
        owner_profile_display_name: owner.display.into(),
        owner_profile_picture: l.signed(media::Derived::Avatar.path(owner.handle)),
        owner_profile_picture_thumbnail: l
            .signed(media::Derived::AvatarThumbnail.path(owner.handle)),
        owner_addresses: Addresses {
            asset_wallet_address: Some(address(&format!("wallet:{}", owner.handle))),
            managed_wallet_address: Some(address(&format!("managed:{}", owner.handle))),
        },
        creator: (!creator_null).then(|| creator.email.into()),
        creator_name: (!creator_null).then(|| creator.handle.into()),
        creator_profile_display_name: (!creator_null).then(|| creator.display.into()),
        creator_profile_picture: (!creator_null)
            .then(|| l.signed(media::Derived::Avatar.path(creator.handle))),
        creator_profile_picture_thumbnail: (!creator_null)
            .then(|| l.signed(media::Derived::AvatarThumbnail.path(creator.handle))),
        creator_addresses: Addresses {
            asset_wallet_address: (!creator_null)
                .then(|| address(&format!("wallet:{}", creator.handle))),
            managed_wallet_address: (!creator_null)
                .then(|| address(&format!("managed:{}", creator.handle))),
        },
        is_original_owner: !store,
        parent_asset: None,
        parent_asset_cid: if child {
            seed_cid(i - 1)
        } else {
            String::new()
        },
        source_transaction: store.then(|| SourceTransaction {
            id: uuid_of(&format!("transaction:{i}")),
            kind: "purchase".into(),
            sender: creator.email.into(),
            sender_name: creator.handle.into(),
            receiver_email: owner.email.into(),
            receiver_address: address(&format!("wallet:{}", owner.handle)),
            receiver_name: owner.handle.into(),
            checkout_order_id: if i.is_multiple_of(2) {
                format!("ord_{}", &hex32(&format!("order:{i}"))[..24])
            } else {
                String::new()
            },
            created_at: iso_micros(uploaded_us - 600_000_000),
            fulfilled_at: iso_micros(uploaded_us - 1_000_000),
            expired_at: iso_micros(uploaded_us + 86_400_000_000 * 7),
            expired: true,
        }),
        task_id: (i % 5 != 4).then(|| uuid_of(&format!("task:{i}"))),
        post_creation_workflow_id: uuid_of(&format!("post-creation:{i}")),
        mint_workflow_id: minted.then(|| uuid_of(&format!("mint:{i}"))),
        search_image_samples_error: if is_image {
            String::new()
        } else {
            "Image sample search skipped: asset is not an image".into()
        },
        create_image_sample_error: if i % 31 == 9 {
            "Sample creation timed out after 30 s".into()
        } else {
            String::new()
        },
        preexisting,
        certified_asset: (i.is_multiple_of(5))
            .then(|| l.signed(media::Derived::Certified.path(&cid))),
        certified_asset_mime_type: if i.is_multiple_of(5) {
            "image/png".into()
        } else {
            String::new()
        },
        certified_asset_thumbnail: (i.is_multiple_of(5))
            .then(|| l.signed(media::Derived::CertifiedThumbnail.path(&cid))),
        certificate_qrcode: l.signed(media::Derived::QrCode.path(&cid)),
        certificate_link: l.public(format!("/verify/{cid}")),
        protected: i % 11 == 4,
        public_access: i % 11 != 4,
        allow_c2pa_download: i.is_multiple_of(3),
        published: i % 19 != 8,
        uploaded_at: iso_micros(uploaded_us),
        updated_at: iso_micros(updated_us),
        parsed_meta: ParsedMeta {
            proof_hash: proof_hash.clone(),
            mime_type: mime.into(),
            capture_time: captured_s,
            capture_latitude: captured.then_some(place.0),
            capture_longitude: captured.then_some(place.1),
            capture_address: captured.then(|| place.2.into()),
            capture_device: captured.then(|| device.into()),
        },
    };
    let template = Template::build(&record, l)?;
    Ok(NewAsset {
        cid,
        uuid,
        uploaded_us,
        source: FileSource::Seed(i),
        file_name: record.asset_file_name,
        mime: mime.into(),
        size: bytes.len() as u64,
        proof_hash,
        template: template.0,
    })
}

fn item(provider: &str, name: &str, value: &str) -> InfoItem {
    InfoItem {
        provider: provider.into(),
        name: name.into(),
        value: Value::String(value.into()),
    }
}
