//! List prices and context windows from OpenRouter's public model catalogue, the one
//! normalisation of model ids into pricing keys, and the cache-aware cost of a round's tokens.
//!
//! Parts: [`pricing_key`]; [`parse_openrouter_catalogue`] and [`fetch_openrouter_catalogue`];
//! [`compute_cost_usd`].

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How long a catalogue fetch may take before it fails.
pub const PRICING_FETCH_TIMEOUT: Duration = Duration::from_secs(20);

/// One model's list prices in USD per million tokens.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelPrice {
    /// Uncached input.
    pub input_per_mtok: f64,
    /// Output.
    pub output_per_mtok: f64,
    /// Input served from the prompt cache, when the catalogue prices it.
    pub cache_read_per_mtok: Option<f64>,
    /// Input written to the prompt cache, when the catalogue prices it.
    pub cache_write_per_mtok: Option<f64>,
}

/// What the catalogue knows of one model.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CatalogueEntry {
    /// Its prices.
    pub prices: ModelPrice,
    /// Its context window in tokens, when published.
    pub context_window: Option<u64>,
}

/// Pricing keys to what the catalogue knows of them.
pub type PricingCatalogue = BTreeMap<String, CatalogueEntry>;

/// Why the catalogue could not be fetched.
#[derive(Debug, thiserror::Error)]
pub enum PricingFetchError {
    /// The request failed or the answer was not JSON.
    #[error("pricing catalogue request failed: {0}")]
    Request(String),
    /// A non-OK answer.
    #[error("pricing catalogue answered {0}")]
    Status(u16),
    /// No answer in [`PRICING_FETCH_TIMEOUT`].
    #[error("pricing catalogue request timed out")]
    TimedOut,
}

/// The key a model id is priced under, so a provider's native id and the catalogue's slug meet:
/// lower-cased; a leading `anthropic/`, `openai/` or `openrouter/` dropped; a trailing
/// `-YYYY-MM-DD`, then a trailing `-YYYYMMDD`, dropped; every `.` turned into `-`. Variant
/// suffixes (`:thinking`, `-fast`) stay: they are priced differently.
pub fn pricing_key(model_id: &str) -> String {
    let mut key = model_id.to_lowercase();
    for prefix in ["anthropic/", "openai/", "openrouter/"] {
        if let Some(rest) = key.strip_prefix(prefix) {
            key = rest.to_owned();
            break;
        }
    }
    if let Some(stripped) = strip_date_suffix(&key, "dddd-dd-dd") {
        key = stripped;
    }
    if let Some(stripped) = strip_date_suffix(&key, "dddddddd") {
        key = stripped;
    }
    key.replace('.', "-")
}

/// `key` without a trailing `-<shape>` where `d` in `shape` is an ASCII digit and `-` itself.
fn strip_date_suffix(key: &str, shape: &str) -> Option<String> {
    let suffix_len = shape.len() + 1;
    let split = key.len().checked_sub(suffix_len)?;
    let suffix = key.get(split..)?.as_bytes();
    let matches = suffix[0] == b'-'
        && shape
            .bytes()
            .zip(&suffix[1..])
            .all(|(want, got)| match want {
                b'd' => got.is_ascii_digit(),
                other => other == *got,
            });
    matches.then(|| key[..split].to_owned())
}

/// A catalogue price (USD per token, as a decimal string or number) per million tokens; `None`
/// when blank or not finite.
fn per_mtok(value: &Value) -> Option<f64> {
    let per_token = match value {
        Value::String(text) if !text.trim().is_empty() => text.trim().parse::<f64>().ok()?,
        Value::Number(number) => number.as_f64()?,
        _ => return None,
    };
    let per_mtok = per_token * 1e6;
    per_mtok.is_finite().then_some(per_mtok)
}

/// The Anthropic and OpenAI models of OpenRouter's `GET /api/v1/models` answer, keyed by
/// [`pricing_key`]; models without both a prompt and a completion price are skipped, and when
/// two slugs share a key the later one wins.
pub fn parse_openrouter_catalogue(body: &Value) -> PricingCatalogue {
    let mut catalogue = PricingCatalogue::new();
    for model in body["data"].as_array().into_iter().flatten() {
        let Some(id) = model["id"].as_str() else {
            continue;
        };
        if !(id.starts_with("anthropic/") || id.starts_with("openai/")) {
            continue;
        }
        let pricing = &model["pricing"];
        let (Some(input), Some(output)) = (
            per_mtok(&pricing["prompt"]),
            per_mtok(&pricing["completion"]),
        ) else {
            continue;
        };
        let context_window = model["context_length"]
            .as_f64()
            .filter(|n| n.is_finite() && *n > 0.0)
            .map(|n| n as u64);
        catalogue.insert(
            pricing_key(id),
            CatalogueEntry {
                prices: ModelPrice {
                    input_per_mtok: input,
                    output_per_mtok: output,
                    cache_read_per_mtok: per_mtok(&pricing["input_cache_read"]),
                    cache_write_per_mtok: per_mtok(&pricing["input_cache_write"]),
                },
                context_window,
            },
        );
    }
    catalogue
}

/// Fetches and parses the public catalogue at `url` (no credential is sent).
pub async fn fetch_openrouter_catalogue(
    client: &reqwest::Client,
    url: &str,
) -> Result<PricingCatalogue, PricingFetchError> {
    let failed =
        |error: reqwest::Error| PricingFetchError::Request(error.without_url().to_string());
    let fetch = async {
        let response = client.get(url).send().await.map_err(failed)?;
        if !response.status().is_success() {
            return Err(PricingFetchError::Status(response.status().as_u16()));
        }
        let body: Value = response.json().await.map_err(failed)?;
        Ok(parse_openrouter_catalogue(&body))
    };
    tokio::time::timeout(PRICING_FETCH_TIMEOUT, fetch)
        .await
        .map_err(|_| PricingFetchError::TimedOut)?
}

/// A round's token buckets, as the cost formula takes them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BilledTokens {
    /// Prompt tokens as the provider reported them.
    pub prompt: u64,
    /// Completion tokens.
    pub completion: u64,
    /// Prompt-cache reads.
    pub cache_read: u64,
    /// Prompt-cache writes.
    pub cache_creation: u64,
}

/// The cost of `tokens` at `price`, rounded to the micro-dollar. Anthropic's prompt count
/// already excludes the cache buckets; every other provider's includes the cache reads, so they
/// are taken out of the regular input. A cache bucket without its own rate is billed as input.
pub fn compute_cost_usd(anthropic: bool, tokens: BilledTokens, price: &ModelPrice) -> f64 {
    let regular_input = if anthropic {
        tokens.prompt
    } else {
        tokens.prompt.saturating_sub(tokens.cache_read)
    };
    let per = |count: u64, rate: f64| count as f64 / 1e6 * rate;
    let cost = per(regular_input, price.input_per_mtok)
        + per(
            tokens.cache_read,
            price.cache_read_per_mtok.unwrap_or(price.input_per_mtok),
        )
        + per(
            tokens.cache_creation,
            price.cache_write_per_mtok.unwrap_or(price.input_per_mtok),
        )
        + per(tokens.completion, price.output_per_mtok);
    (cost * 1e6).round() / 1e6
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn pricing_keys_match_the_reference_examples() {
        let cases = [
            ("claude-opus-4-8-20260514", "claude-opus-4-8"),
            ("anthropic/claude-opus-4.8", "claude-opus-4-8"),
            ("openai/gpt-4o-2024-08-06", "gpt-4o"),
            ("gpt-5.4-mini", "gpt-5-4-mini"),
            (
                "anthropic/claude-3.7-sonnet:thinking",
                "claude-3-7-sonnet:thinking",
            ),
            ("claude-3-5-sonnet-20241022", "claude-3-5-sonnet"),
            ("OpenRouter/Claude-Haiku-4-5-fast", "claude-haiku-4-5-fast"),
            // Dots are turned into dashes after the date step, so a dotted date stays.
            ("model-2024.08.06", "model-2024-08-06"),
            ("gpt-4o-2024-8-06", "gpt-4o-2024-8-06"),
            ("", ""),
        ];
        for (input, key) in cases {
            assert_eq!(pricing_key(input), key, "{input}");
        }
    }

    #[test]
    fn the_catalogue_keeps_priced_anthropic_and_openai_models() {
        let body = json!({"data": [
            {"id": "anthropic/claude-opus-4.8", "context_length": 200000,
             "pricing": {"prompt": "0.000015", "completion": "0.000075",
                         "input_cache_read": "0.0000015", "input_cache_write": "0.00001875"}},
            {"id": "openai/gpt-4o", "pricing": {"prompt": "0.0000025", "completion": "0.00001"}},
            {"id": "openai/gpt-4o-2024-08-06", "context_length": 128000,
             "pricing": {"prompt": "0.000003", "completion": "0.00001"}},
            {"id": "openai/free", "pricing": {"prompt": "", "completion": "0"}},
            {"id": "meta/llama", "pricing": {"prompt": "0.000001", "completion": "0.000001"}},
            {"id": "anthropic/bad", "pricing": {"prompt": "x", "completion": "0.1"}},
        ]});
        let catalogue = parse_openrouter_catalogue(&body);
        assert_eq!(
            catalogue.keys().collect::<Vec<_>>(),
            ["claude-opus-4-8", "gpt-4o"]
        );
        let opus = catalogue["claude-opus-4-8"];
        assert_eq!(opus.context_window, Some(200_000));
        assert!((opus.prices.input_per_mtok - 15.0).abs() < 1e-9);
        assert!((opus.prices.cache_read_per_mtok.unwrap() - 1.5).abs() < 1e-9);
        // The later slug with the same key wins.
        let gpt = catalogue["gpt-4o"];
        assert!((gpt.prices.input_per_mtok - 3.0).abs() < 1e-9);
        assert_eq!(gpt.context_window, Some(128_000));
    }

    #[test]
    fn cost_is_cache_aware_per_provider() {
        let price = ModelPrice {
            input_per_mtok: 3.0,
            output_per_mtok: 15.0,
            cache_read_per_mtok: Some(0.3),
            cache_write_per_mtok: Some(3.75),
        };
        let tokens = BilledTokens {
            prompt: 1_000,
            completion: 500,
            cache_read: 2_000,
            cache_creation: 400,
        };
        // Anthropic: the prompt excludes the cache buckets.
        let anthropic =
            1_000.0 / 1e6 * 3.0 + 2_000.0 / 1e6 * 0.3 + 400.0 / 1e6 * 3.75 + 500.0 / 1e6 * 15.0;
        assert!((compute_cost_usd(true, tokens, &price) - anthropic).abs() < 1e-12);
        // Others: cache reads are part of the prompt (and never make it negative).
        let openai = BilledTokens {
            prompt: 3_000,
            cache_creation: 0,
            ..tokens
        };
        let expected = 1_000.0 / 1e6 * 3.0 + 2_000.0 / 1e6 * 0.3 + 500.0 / 1e6 * 15.0;
        assert!((compute_cost_usd(false, openai, &price) - expected).abs() < 1e-12);
        // Missing cache rates fall back to the input rate; results round to 6 places.
        let plain = ModelPrice {
            cache_read_per_mtok: None,
            cache_write_per_mtok: None,
            ..price
        };
        let one = BilledTokens {
            prompt: 1,
            completion: 0,
            cache_read: 0,
            cache_creation: 1,
        };
        assert_eq!(compute_cost_usd(true, one, &plain), 0.000006);
        assert_eq!(compute_cost_usd(true, BilledTokens::default(), &plain), 0.0);
    }
}
