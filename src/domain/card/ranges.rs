//! Embedded tables that classify a card number: the IIN ranges that give its brand, and a
//! small table of specific BINs that give its funding type and issuer.
//!
//! Both are plain `const` arrays searched linearly (a few dozen rows); no I/O.
//!
//! **IIN ranges** ([`brand_of`]): each row is a range of prefixes of one length, e.g. the
//! 4-digit prefixes 2221..=2720 for Mastercard. A number matches a row when its first `len`
//! digits fall in the range. The longest matching prefix wins, which is how the Discover range
//! 622126–622925 beats UnionPay's `62`. Rows are kept sorted by prefix length, longest first,
//! so the first match is the longest; a test checks that order and that rows of one length
//! never overlap. A number shorter than a row's prefix does not match that row. Per-brand
//! number lengths are not checked (validation asks 12–19 digits of every brand).
//!
//! **BINs** ([`bin_info`]): specific 6–8 digit prefixes, longest match first. The rows are the
//! networks' and processors' well-known public *test* card BINs with made-up "Sandbox ..."
//! issuer names: sandbox data for development, not a real BIN database. A number whose BIN
//! is not listed is `Credit`, with no issuer, in its brand's colours.

use super::brand::{Brand, Funding};

/// One row of the IIN table: `len`-digit prefixes from `lo` to `hi` inclusive.
struct IinRange {
    len: usize,
    lo: u32,
    hi: u32,
    brand: Brand,
}

const fn iin(len: usize, lo: u32, hi: u32, brand: Brand) -> IinRange {
    IinRange { len, lo, hi, brand }
}

/// IIN ranges, longest prefix first.
const IIN_RANGES: &[IinRange] = &[
    // 6 digits
    iin(6, 622126, 622925, Brand::Discover), // China UnionPay co-branded, routed as Discover
    iin(6, 676770, 676770, Brand::Maestro),
    iin(6, 676774, 676774, Brand::Maestro),
    // 4 digits
    iin(4, 2221, 2720, Brand::Mastercard), // the 2-series
    iin(4, 3528, 3589, Brand::Jcb),
    iin(4, 6011, 6011, Brand::Discover),
    iin(4, 6304, 6304, Brand::Maestro),
    iin(4, 6759, 6759, Brand::Maestro),
    iin(4, 6761, 6763, Brand::Maestro),
    // 3 digits
    iin(3, 300, 305, Brand::DinersClub),
    iin(3, 644, 649, Brand::Discover),
    // 2 digits
    iin(2, 34, 34, Brand::Amex),
    iin(2, 36, 36, Brand::DinersClub),
    iin(2, 37, 37, Brand::Amex),
    iin(2, 38, 39, Brand::DinersClub),
    iin(2, 50, 50, Brand::Maestro),
    iin(2, 51, 55, Brand::Mastercard),
    iin(2, 56, 58, Brand::Maestro),
    iin(2, 62, 62, Brand::UnionPay),
    iin(2, 65, 65, Brand::Discover),
    // 1 digit
    iin(1, 4, 4, Brand::Visa),
];

/// The value of the first `len` bytes of `number` if they are all ASCII digits.
fn prefix_value(number: &str, len: usize) -> Option<u32> {
    let head = number.as_bytes().get(..len)?;
    head.iter().try_fold(0u32, |acc, &b| {
        b.is_ascii_digit().then(|| acc * 10 + u32::from(b - b'0'))
    })
}

/// The brand of a card number (digits only) from the embedded IIN range table; the longest
/// matching prefix wins. Anything unmatched, including non-digits, is [`Brand::Unknown`].
pub fn brand_of(number: &str) -> Brand {
    IIN_RANGES
        .iter()
        .find(|r| prefix_value(number, r.len).is_some_and(|v| (r.lo..=r.hi).contains(&v)))
        .map_or(Brand::Unknown, |r| r.brand)
}

/// What the BIN table knows about a card, with defaults filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BinInfo {
    /// Credit or debit; `Credit` when the BIN is not listed.
    pub funding: Funding,
    /// Issuer name, when the BIN is listed (sandbox names, see the module doc).
    pub issuer_name: Option<&'static str>,
    /// Card art URL, when the issuer has one. The sandbox table has none.
    pub art_url: Option<&'static str>,
    /// Card background `#RRGGBB`: the issuer's, else the brand's colour.
    pub background_color: &'static str,
    /// Card text colour `#RRGGBB`: the issuer's, else the brand's.
    pub foreground_color: &'static str,
}

/// One row of the BIN table.
struct BinRow {
    bin: &'static str,
    brand: Brand,
    funding: Funding,
    issuer: &'static str,
    /// `(background, foreground)` when the issuer has its own card colours.
    colors: Option<(&'static str, &'static str)>,
}

const fn bin(bin: &'static str, brand: Brand, funding: Funding, issuer: &'static str) -> BinRow {
    BinRow {
        bin,
        brand,
        funding,
        issuer,
        colors: None,
    }
}

const SANDBOX_BANK: &str = "Sandbox Bank";
const SANDBOX_CU: &str = "Sandbox Credit Union";
const SANDBOX_SAVINGS: &str = "Sandbox Savings";

/// Specific BINs, longest first. Public test card BINs (shown with a test number each).
const BINS: &[BinRow] = &[
    // 8 digits: a narrower row inside a 6-digit one, so the longest match is exercised.
    BinRow {
        colors: Some(("#0F766E", "#FFFFFF")),
        ..bin("40000566", Brand::Visa, Funding::Debit, SANDBOX_CU)
    },
    // 6 digits
    bin("424242", Brand::Visa, Funding::Credit, SANDBOX_BANK), // 4242424242424242
    bin("400005", Brand::Visa, Funding::Debit, SANDBOX_BANK),  // 4000056655665556
    bin("411111", Brand::Visa, Funding::Credit, SANDBOX_SAVINGS), // 4111111111111111
    bin("555555", Brand::Mastercard, Funding::Credit, SANDBOX_BANK), // 5555555555554444
    bin("222300", Brand::Mastercard, Funding::Credit, SANDBOX_BANK), // 2223003122003222
    bin("520082", Brand::Mastercard, Funding::Debit, SANDBOX_BANK), // 5200828282828210
    bin("510510", Brand::Mastercard, Funding::Debit, SANDBOX_CU), // 5105105105105100 (prepaid)
    bin("378282", Brand::Amex, Funding::Credit, SANDBOX_BANK), // 378282246310005
    bin("371449", Brand::Amex, Funding::Credit, SANDBOX_SAVINGS), // 371449635398431
    bin("601111", Brand::Discover, Funding::Credit, SANDBOX_BANK), // 6011111111111117
    bin("601100", Brand::Discover, Funding::Credit, SANDBOX_SAVINGS), // 6011000990139424
    bin("601198", Brand::Discover, Funding::Debit, SANDBOX_BANK), // 6011981111111113
    bin("353011", Brand::Jcb, Funding::Credit, SANDBOX_BANK),  // 3530111333300000
    bin("356600", Brand::Jcb, Funding::Credit, SANDBOX_SAVINGS), // 3566002020360505
    bin("305693", Brand::DinersClub, Funding::Credit, SANDBOX_BANK), // 3056930009020004
    bin(
        "362272",
        Brand::DinersClub,
        Funding::Credit,
        SANDBOX_SAVINGS,
    ), // 36227206271667
    bin("620000", Brand::UnionPay, Funding::Credit, SANDBOX_BANK), // 6200000000000005
    bin("620550", Brand::UnionPay, Funding::Debit, SANDBOX_BANK), // 6205500000000000004
    bin("675964", Brand::Maestro, Funding::Debit, SANDBOX_BANK), // 6759649826438453
];

/// Funding, issuer and colours for a card number (digits only) from the embedded BIN table;
/// the longest listed prefix wins. Unlisted: `Credit`, no issuer, no art, the colours of
/// [`brand_of`]`(number)`.
pub fn bin_info(number: &str) -> BinInfo {
    bin_info_for(number, brand_of(number))
}

/// [`bin_info`] with the default colours taken from `brand` instead of the number's range
/// (for callers that only hold the 6-digit BIN and the stored brand).
pub(crate) fn bin_info_for(number: &str, brand: Brand) -> BinInfo {
    match BINS.iter().find(|row| number.starts_with(row.bin)) {
        Some(row) => {
            let (background_color, foreground_color) = row
                .colors
                .unwrap_or((row.brand.color(), row.brand.foreground_color()));
            BinInfo {
                funding: row.funding,
                issuer_name: Some(row.issuer),
                art_url: None,
                background_color,
                foreground_color,
            }
        }
        None => BinInfo {
            funding: Funding::Credit,
            issuer_name: None,
            art_url: None,
            background_color: brand.color(),
            foreground_color: brand.foreground_color(),
        },
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn iin_table_is_longest_first_and_well_formed() {
        for pair in IIN_RANGES.windows(2) {
            assert!(
                pair[0].len >= pair[1].len,
                "table not sorted by prefix length"
            );
        }
        for (i, r) in IIN_RANGES.iter().enumerate() {
            assert!(r.lo <= r.hi);
            assert_eq!(r.lo.to_string().len(), r.len, "lo of row {i}");
            assert_eq!(r.hi.to_string().len(), r.len, "hi of row {i}");
            for other in &IIN_RANGES[i + 1..] {
                if other.len == r.len {
                    assert!(
                        other.hi < r.lo || other.lo > r.hi,
                        "rows overlap at row {i}"
                    );
                }
            }
        }
    }

    #[test]
    fn brand_of_ranges_and_boundaries() {
        use Brand::*;
        let cases: &[(&str, Brand)] = &[
            ("4242424242424242", Visa),
            ("4", Visa),
            ("5100000000000000", Mastercard),
            ("5599999999999999", Mastercard),
            ("2221000000000009", Mastercard),
            ("2720999999999996", Mastercard),
            ("2220999999999999", Unknown),
            ("2721000000000000", Unknown),
            ("340000000000000", Amex),
            ("370000000000000", Amex),
            ("350000000000000", Unknown),
            ("3527999999999999", Unknown),
            ("3528000000000007", Jcb),
            ("3589000000000003", Jcb),
            ("3590000000000000", Unknown),
            ("30000000000004", DinersClub),
            ("30500000000003", DinersClub),
            ("30600000000000", Unknown),
            ("36227206271667", DinersClub),
            ("38123456789011", DinersClub),
            ("3900000000000000", DinersClub),
            ("6011111111111117", Discover),
            ("6012000000000000", Unknown),
            ("6221250000000001", UnionPay),
            ("6221260000000000", Discover),
            ("6229250000000003", Discover),
            ("6229260000000000", UnionPay),
            ("6221", UnionPay), // too short for the 6-digit Discover row
            ("6200000000000005", UnionPay),
            ("6430000000000000", Unknown),
            ("6440000000000005", Discover),
            ("6490000000000000", Discover),
            ("6500000000000002", Discover),
            ("5018000000000009", Maestro),
            ("5600000000000000", Maestro),
            ("5800000000000001", Maestro),
            ("5900000000000000", Unknown),
            ("6304000000000000", Maestro),
            ("6759649826438453", Maestro),
            ("6762000000000000", Maestro),
            ("6767700000000005", Maestro),
            ("6767740000000000", Maestro),
            ("6767710000000000", Unknown),
            ("9999999999999995", Unknown),
            ("", Unknown),
            ("x242424242424242", Unknown),
            ("４242", Unknown), // full-width digit
        ];
        for (number, want) in cases {
            assert_eq!(brand_of(number), *want, "brand_of({number:?})");
        }
    }

    #[test]
    fn bin_table_is_longest_first_and_agrees_with_iin_table() {
        for pair in BINS.windows(2) {
            assert!(pair[0].bin.len() >= pair[1].bin.len());
        }
        for row in BINS {
            assert!((6..=8).contains(&row.bin.len()), "{}", row.bin);
            assert!(row.bin.bytes().all(|b| b.is_ascii_digit()), "{}", row.bin);
            assert_eq!(brand_of(row.bin), row.brand, "brand of BIN {}", row.bin);
            assert_eq!(BINS.iter().filter(|r| r.bin == row.bin).count(), 1);
        }
    }

    #[test]
    fn bin_info_lookups() {
        let cases: &[(&str, Funding, Option<&str>, &str)] = &[
            (
                "4242424242424242",
                Funding::Credit,
                Some(SANDBOX_BANK),
                "#1A1F71",
            ),
            (
                "4000056655665556",
                Funding::Debit,
                Some(SANDBOX_CU),
                "#0F766E",
            ), // 8-digit row wins
            (
                "4000051111111115",
                Funding::Debit,
                Some(SANDBOX_BANK),
                "#1A1F71",
            ),
            (
                "5200828282828210",
                Funding::Debit,
                Some(SANDBOX_BANK),
                "#EB001B",
            ),
            (
                "5555555555554444",
                Funding::Credit,
                Some(SANDBOX_BANK),
                "#EB001B",
            ),
            (
                "378282246310005",
                Funding::Credit,
                Some(SANDBOX_BANK),
                "#006FCF",
            ),
            (
                "6011981111111113",
                Funding::Debit,
                Some(SANDBOX_BANK),
                "#FF6000",
            ),
            ("4012888888881881", Funding::Credit, None, "#1A1F71"),
            ("9999999999999995", Funding::Credit, None, "#4B5563"),
        ];
        for (number, funding, issuer, bg) in cases {
            let info = bin_info(number);
            assert_eq!(info.funding, *funding, "{number}");
            assert_eq!(info.issuer_name, *issuer, "{number}");
            assert_eq!(info.background_color, *bg, "{number}");
            assert_eq!(info.foreground_color, "#FFFFFF", "{number}");
            assert_eq!(info.art_url, None);
        }
    }

    #[test]
    fn bin_info_for_uses_given_brand_when_unlisted() {
        assert_eq!(
            bin_info_for("999999", Brand::Jcb).background_color,
            "#0B4EA2"
        );
    }
}
