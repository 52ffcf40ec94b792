//! The seed's vocabulary: accounts, captions, headlines and places the demo assets are made of.

pub(super) struct Account {
    pub(super) email: &'static str,
    pub(super) handle: &'static str,
    pub(super) display: &'static str,
}

pub(super) const ACCOUNTS: &[Account] = &[
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

pub(super) const CAPTIONS: &[&str] = &[
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

pub(super) const LONG_CAPTION: &str = "Field notes. This capture documents the state of the river embankment after three days of \
continuous rain. The photographer walked the full length of the eastern bank between the old mill and the rail \
bridge, recording cracks in the retaining wall, debris lines, and the height reached by the water on the \
marker posts.\n\nAll images were captured with the registration app, which seals the device time, location and \
a hash of the pixels at the moment of capture, so later edits can be detected.\n\nContact the newsdesk before \
republishing.";

pub(super) const HEADLINES: &[&str] = &[
    "Harbour sunrise",
    "Flooded market",
    "March for rights",
    "Council minutes",
    "Ridge fire",
    "",
    "Night market",
    "Polling queue",
];

pub(super) const PLACES: &[(f64, f64, &str)] = &[
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
