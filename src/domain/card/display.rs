//! The two shapes of the Card Display object: `{name, color}` in the create
//! response, `{artUrl, backgroundColor, foregroundColor, description, issuerName}` in list and
//! get responses.

use serde::{Deserialize, Serialize};

use super::brand::{Brand, Funding};
use super::ranges::bin_info_for;

/// `card.display` in the create response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DisplayCreate {
    /// Human-readable brand name, e.g. "American Express".
    pub name: String,
    /// Brand colour, `#RRGGBB`.
    pub color: String,
}

/// `card.display` in list and get responses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DisplayListed {
    /// Card art URL; omitted when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub art_url: Option<String>,
    /// `#RRGGBB`.
    pub background_color: String,
    /// `#RRGGBB`.
    pub foreground_color: String,
    /// e.g. "Visa Credit •••• 4242".
    pub description: String,
    /// Issuer name; omitted when the BIN is not in the table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer_name: Option<String>,
}

/// The create response's display: brand name and colour.
pub fn display_create(brand: Brand) -> DisplayCreate {
    DisplayCreate {
        name: brand.display_name().to_owned(),
        color: brand.color().to_owned(),
    }
}

/// The list/get display of a stored card, from what is stored in clear: brand, funding, last 4
/// and the 6-digit BIN. Issuer, art and colours come from the BIN table (ranges.rs), with the
/// colours of `brand` when the BIN is not listed. The description is
/// `"{brand} {funding} •••• {last4}"`, e.g. "Visa Credit •••• 4242".
pub fn display_listed(brand: Brand, funding: Funding, last4: &str, bin: &str) -> DisplayListed {
    let info = bin_info_for(bin, brand);
    DisplayListed {
        art_url: info.art_url.map(str::to_owned),
        background_color: info.background_color.to_owned(),
        foreground_color: info.foreground_color.to_owned(),
        description: format!(
            "{} {} \u{2022}\u{2022}\u{2022}\u{2022} {last4}",
            brand.display_name(),
            funding.display_name()
        ),
        issuer_name: info.issuer_name.map(str::to_owned),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn create_shape() {
        let v = serde_json::to_value(display_create(Brand::Amex)).unwrap();
        assert_eq!(v, json!({"name": "American Express", "color": "#006FCF"}));
        let v = serde_json::to_value(display_create(Brand::Visa)).unwrap();
        assert_eq!(v, json!({"name": "Visa", "color": "#1A1F71"}));
    }

    #[test]
    fn listed_shape_with_issuer() {
        let v = serde_json::to_value(display_listed(
            Brand::Visa,
            Funding::Credit,
            "4242",
            "424242",
        ))
        .unwrap();
        assert_eq!(
            v,
            json!({
                "backgroundColor": "#1A1F71",
                "foregroundColor": "#FFFFFF",
                "description": "Visa Credit •••• 4242",
                "issuerName": "Sandbox Bank"
            })
        );
    }

    #[test]
    fn listed_shape_unlisted_bin_omits_optionals() {
        let d = display_listed(Brand::Mastercard, Funding::Debit, "0004", "510000");
        assert_eq!(d.description, "Mastercard Debit •••• 0004");
        assert_eq!(d.background_color, "#EB001B");
        let v = serde_json::to_value(&d).unwrap();
        let obj = v.as_object().unwrap();
        assert!(
            !obj.contains_key("artUrl") && !obj.contains_key("issuerName"),
            "{v}"
        );
    }

    #[test]
    fn listed_unknown_brand_reads_card() {
        let d = display_listed(Brand::Unknown, Funding::Credit, "9995", "999999");
        assert_eq!(d.description, "Card Credit •••• 9995");
        assert_eq!(d.background_color, Brand::Unknown.color());
    }
}
