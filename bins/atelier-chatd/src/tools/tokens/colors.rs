//! Colour tokens: the variable of each token (`--<slug>`) and of its generated variants —
//! transparent `--<slug>-5` … `--<slug>-90`, shades `--<slug>-d-N` and tints `--<slug>-l-N`
//! with N from 1 to the count clamped to 0..=12 — their values as the stylesheet writes
//! them (`hsla(…)`), and the utility classes bound to each.
//!
//! Colours the generator can read (hex, `rgb[a]()`, `hsl[a]()`) are written back as
//! `hsla()`; anything else (`oklch()`, named colours) keeps its authored text for the base
//! variable and has no variants, since none can be derived from it.

use std::collections::HashSet;
use std::sync::LazyLock;

use regex::Regex;

use super::{
    js_round, js_string, locale_cmp, ColorDescriptor, ColorSettings, ColorToken,
    ColorVariantDescriptor,
};

/// The opacities of the transparent variants, in percent.
const TRANSPARENT_STEPS: [u32; 10] = [5, 10, 20, 30, 40, 50, 60, 70, 80, 90];

/// The most shades or tints a token can have.
const MAX_VARIANTS: f64 = 12.0;

static HSLA: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"(?i)^hsla?\(\s*([-+]?[0-9]*\.?[0-9]+)(?:deg)?\s*,\s*([-+]?[0-9]*\.?[0-9]+)%\s*,\s*([-+]?[0-9]*\.?[0-9]+)%(?:\s*,\s*([-+]?[0-9]*\.?[0-9]+))?\s*\)$",
    )
    .ok()
});
static HEX: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?i)^#([0-9a-f]{3}|[0-9a-f]{6})$").ok());
static RGBA: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"(?i)^rgba?\(\s*([0-9]*\.?[0-9]+)\s*[, ]\s*([0-9]*\.?[0-9]+)\s*[, ]\s*([0-9]*\.?[0-9]+)\s*(?:[,/]\s*([0-9]*\.?[0-9]+%?))?\s*\)$",
    )
    .ok()
});

/// A colour as hue (degrees), saturation and lightness (percent) and alpha (0..=1).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Hsla {
    h: f64,
    s: f64,
    l: f64,
    a: f64,
}

/// A generated variable of a token.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Variant {
    Base,
    Transparent(u32),
    Shade { index: u32, count: u32 },
    Tint { index: u32, count: u32 },
}

// === impl Variant ===

impl Variant {
    /// The label appended to the slug; none for the base.
    fn label(self) -> Option<String> {
        match self {
            Variant::Base => None,
            Variant::Transparent(step) => Some(step.to_string()),
            Variant::Shade { index, .. } => Some(format!("d-{index}")),
            Variant::Tint { index, .. } => Some(format!("l-{index}")),
        }
    }

    /// Its value from the token's `base` colour; `None` when it cannot be derived.
    fn value(self, base: &str) -> Option<String> {
        match self {
            Variant::Base => parse(base).map(format_hsla).or_else(|| {
                let trimmed = base.trim();
                (!trimmed.is_empty()).then(|| trimmed.to_owned())
            }),
            Variant::Transparent(step) => parse(base).map(|c| {
                format_hsla(Hsla {
                    a: f64::from(step) / 100.0,
                    ..c
                })
            }),
            Variant::Shade { index, count } => parse(base).map(|c| {
                let ratio = f64::from(index) / f64::from(count + 1);
                format_hsla(Hsla {
                    l: c.l * (1.0 - ratio * 0.8),
                    ..c
                })
            }),
            Variant::Tint { index, count } => parse(base).map(|c| {
                let ratio = f64::from(index) / f64::from(count + 1);
                format_hsla(Hsla {
                    l: c.l + (100.0 - c.l) * ratio * 0.8,
                    ..c
                })
            }),
        }
    }
}

/// The token's variants in the generator's order: base, transparent, shades, tints.
fn variants(token: &ColorToken) -> Vec<Variant> {
    let mut out = vec![Variant::Base];
    if token.generate_transparent {
        out.extend(TRANSPARENT_STEPS.iter().map(|s| Variant::Transparent(*s)));
    }
    if token.generate_shades.enabled {
        let count = clamp_count(token.generate_shades.count);
        out.extend((1..=count).map(|index| Variant::Shade { index, count }));
    }
    if token.generate_tints.enabled {
        let count = clamp_count(token.generate_tints.count);
        out.extend((1..=count).map(|index| Variant::Tint { index, count }));
    }
    out
}

fn clamp_count(count: f64) -> u32 {
    // NaN counts as none, as the comparison chain in the editor yields NaN → no iterations.
    if count.is_nan() {
        return 0;
    }
    // The clamp keeps the cast in range.
    count.floor().clamp(0.0, MAX_VARIANTS) as u32
}

/// The variable slug of an authored one: lower case, runs of anything but `a-z0-9` as one
/// `-`, no leading `--` or edge dashes; `color` when nothing is left.
pub fn normalize_slug(input: &str) -> String {
    let lower = input.trim().to_lowercase();
    let lower = lower.trim_start_matches('-');
    let mut slug = String::with_capacity(lower.len());
    let mut in_run = false;
    for c in lower.chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            slug.push(c);
            in_run = false;
        } else if !in_run {
            slug.push('-');
            in_run = true;
        }
    }
    let slug = slug.trim_matches('-');
    if slug.is_empty() {
        "color".to_owned()
    } else {
        slug.to_owned()
    }
}

/// The colour descriptors of `settings`, in the generator's order.
pub fn describe(settings: &ColorSettings) -> Vec<ColorDescriptor> {
    let mut tokens: Vec<&ColorToken> = settings.tokens.iter().collect();
    tokens.sort_by(|a, b| {
        a.order
            .partial_cmp(&b.order)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| locale_cmp(&a.slug, &b.slug))
    });
    // Two authored slugs may normalise alike; the later token gets -2, -3, … so neither
    // shadows the other.
    let mut used = HashSet::new();
    let mut out = Vec::new();
    for token in tokens {
        let base = normalize_slug(&token.slug);
        let mut slug = base.clone();
        let mut suffix = 2;
        while used.contains(&slug) {
            slug = format!("{base}-{suffix}");
            suffix += 1;
        }
        used.insert(slug.clone());
        if let Some(descriptor) = describe_token(token, slug) {
            out.push(descriptor);
        }
    }
    out
}

/// A token whose light value is empty has no variable at all, so it is left out.
fn describe_token(token: &ColorToken, slug: String) -> Option<ColorDescriptor> {
    let value = Variant::Base.value(&token.light_value)?;
    let dark_value = if token.dark_mode_enabled {
        Variant::Base.value(&token.dark_value)
    } else {
        None
    };
    let mut variants_out = Vec::new();
    for variant in variants(token).into_iter().skip(1) {
        let Some(value) = variant.value(&token.light_value) else {
            continue;
        };
        let label = variant.label().unwrap_or_default();
        let name = format!("{slug}-{label}");
        variants_out.push(ColorVariantDescriptor {
            variant: label,
            css_var: format!("--{name}"),
            reference: format!("var(--{name})"),
            value,
            utility_classes: utility_classes(token, &name),
        });
    }
    Some(ColorDescriptor {
        category: token.category.clone(),
        css_var: format!("--{slug}"),
        reference: format!("var(--{slug})"),
        value,
        utility_classes: utility_classes(token, &slug),
        dark_value,
        variants: variants_out,
        slug,
    })
}

/// The classes of one variable, in the order text, background, border, fill.
fn utility_classes(token: &ColorToken, name: &str) -> Vec<String> {
    let wanted = &token.generate_utilities;
    [
        (wanted.text, "text"),
        (wanted.background, "bg"),
        (wanted.border, "border"),
        (wanted.fill, "fill"),
    ]
    .into_iter()
    .filter(|(on, _)| *on)
    .map(|(_, prefix)| format!("{prefix}-{name}"))
    .collect()
}

// === Colour parsing and printing ===

fn number(text: &str) -> f64 {
    text.parse().unwrap_or(f64::NAN)
}

/// JavaScript's `Math.max(min, Math.min(max, v))`, NaN staying NaN.
fn clamp(v: f64, min: f64, max: f64) -> f64 {
    if v.is_nan() {
        return v;
    }
    v.clamp(min, max)
}

fn normalize_hue(h: f64) -> f64 {
    ((h % 360.0) + 360.0) % 360.0
}

fn parse(value: &str) -> Option<Hsla> {
    let input = value.trim();
    if let Some(c) = HSLA.as_ref().and_then(|re| re.captures(input)) {
        return Some(Hsla {
            h: normalize_hue(number(&c[1])),
            s: clamp(number(&c[2]), 0.0, 100.0),
            l: clamp(number(&c[3]), 0.0, 100.0),
            a: c.get(4)
                .map_or(1.0, |a| clamp(number(a.as_str()), 0.0, 1.0)),
        });
    }
    if let Some(c) = HEX.as_ref().and_then(|re| re.captures(input)) {
        let hex = &c[1];
        let channel = |text: &str| f64::from(u8::from_str_radix(text, 16).unwrap_or(0));
        let (r, g, b) = if hex.len() == 3 {
            let doubled = |i: usize| channel(&hex[i..=i].repeat(2));
            (doubled(0), doubled(1), doubled(2))
        } else {
            (
                channel(&hex[0..2]),
                channel(&hex[2..4]),
                channel(&hex[4..6]),
            )
        };
        return Some(rgb_to_hsl(r, g, b));
    }
    if let Some(c) = RGBA.as_ref().and_then(|re| re.captures(input)) {
        let alpha = match c.get(4).map(|m| m.as_str()) {
            None => 1.0,
            Some(text) => match text.strip_suffix('%') {
                Some(percent) => clamp(number(percent) / 100.0, 0.0, 1.0),
                None => clamp(number(text), 0.0, 1.0),
            },
        };
        let channel = |i: usize| clamp(number(&c[i]), 0.0, 255.0);
        return Some(Hsla {
            a: alpha,
            ..rgb_to_hsl(channel(1), channel(2), channel(3))
        });
    }
    None
}

fn rgb_to_hsl(r: f64, g: f64, b: f64) -> Hsla {
    let (r, g, b) = (r / 255.0, g / 255.0, b / 255.0);
    let max = r.max(g).max(b);
    let min = r.min(g).min(b);
    let l = (max + min) / 2.0;
    if max == min {
        return Hsla {
            h: 0.0,
            s: 0.0,
            l: l * 100.0,
            a: 1.0,
        };
    }
    let d = max - min;
    let s = if l > 0.5 {
        d / (2.0 - max - min)
    } else {
        d / (max + min)
    };
    let h = if max == r {
        (g - b) / d + if g < b { 6.0 } else { 0.0 }
    } else if max == g {
        (b - r) / d + 2.0
    } else {
        (r - g) / d + 4.0
    };
    Hsla {
        h: h * 60.0,
        s: s * 100.0,
        l: l * 100.0,
        a: 1.0,
    }
}

/// Two decimals at most, halves rounded up, as the stylesheet writes channel values.
fn print_channel(v: f64) -> String {
    js_string(js_round(v * 100.0) / 100.0)
}

fn format_hsla(c: Hsla) -> String {
    format!(
        "hsla({}, {}%, {}%, {})",
        print_channel(normalize_hue(c.h)),
        print_channel(clamp(c.s, 0.0, 100.0)),
        print_channel(clamp(c.l, 0.0, 100.0)),
        print_channel(clamp(c.a, 0.0, 1.0))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_are_written_as_hsla() {
        assert_eq!(
            Variant::Base.value("#ff0000").as_deref(),
            Some("hsla(0, 100%, 50%, 1)")
        );
        assert_eq!(
            Variant::Base.value("rgb(0 0 255 / 50%)").as_deref(),
            Some("hsla(240, 100%, 50%, 0.5)")
        );
        assert_eq!(
            Variant::Base.value("hsl(-30deg, 40%, 50%)").as_deref(),
            Some("hsla(330, 40%, 50%, 1)")
        );
        assert_eq!(
            Variant::Base.value(" oklch(0.7 0.1 30) ").as_deref(),
            Some("oklch(0.7 0.1 30)")
        );
        assert_eq!(Variant::Transparent(30).value("oklch(0.7 0.1 30)"), None);
        assert_eq!(
            Variant::Shade { index: 1, count: 1 }
                .value("#fff")
                .as_deref(),
            Some("hsla(0, 0%, 60%, 1)")
        );
        assert_eq!(Variant::Base.value("  "), None);
    }

    #[test]
    fn slugs_normalise_and_counts_clamp() {
        assert_eq!(normalize_slug("--Primary Color"), "primary-color");
        assert_eq!(normalize_slug("Ünï"), "n");
        assert_eq!(normalize_slug("***"), "color");
        assert_eq!(clamp_count(40.0), 12);
        assert_eq!(clamp_count(-1.0), 0);
        assert_eq!(clamp_count(2.9), 2);
    }
}
