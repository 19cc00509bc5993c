//! The site's design tokens as the agent sees them, derived from the settings the editor
//! posts (`site.settings.framework` and `site.settings.fonts`) with the same naming rules the
//! CMS's stylesheet generator uses, so a variable named here is one the published page
//! declares.
//!
//! Parts: the posted settings as typed values ([`FrameworkSettings`], [`FontSettings`]), the
//! digest returned by `site_list_tokens` and summarised in the prompt ([`TokenDigest`]), and
//! [`describe`], which derives one from the other. The per-family rules live in [`colors`],
//! [`scales`] (typography and spacing) and [`fonts`]. Numbers are printed the way the
//! editor's JavaScript prints them, since the values end up in CSS the model copies.

pub mod colors;
pub mod fonts;
pub mod scales;

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

// === Posted settings ===

/// `site.settings` as far as tokens go; the rest of the settings is ignored.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SiteSettings {
    /// Colours, type and spacing scales, preferences; absent when the site has none.
    #[serde(default)]
    pub framework: Option<FrameworkSettings>,
    /// The font library and its tokens.
    #[serde(default)]
    pub fonts: Option<FontSettings>,
}

/// `settings.framework`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FrameworkSettings {
    /// The colour tokens.
    #[serde(default)]
    pub colors: ColorSettings,
    /// The type scales.
    #[serde(default)]
    pub typography: Option<ScaleSettings>,
    /// The spacing scales.
    #[serde(default)]
    pub spacing: Option<ScaleSettings>,
    /// Root font size and screen range of the fluid scales.
    #[serde(default)]
    pub preferences: Option<Preferences>,
}

/// `framework.colors`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ColorSettings {
    /// The tokens, in no particular order (`order` sorts them).
    #[serde(default)]
    pub tokens: Vec<ColorToken>,
}

/// One colour token. Missing flags take the editor's defaults: every variant family on,
/// four shades and tints, utilities for text, background and border.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ColorToken {
    /// Its id.
    pub id: String,
    /// A free label; empty means uncategorised.
    #[serde(default)]
    pub category: String,
    /// The authored slug, normalised into the variable name.
    pub slug: String,
    /// The light-theme colour.
    pub light_value: String,
    /// The dark-theme colour.
    #[serde(default)]
    pub dark_value: String,
    /// Whether the dark value is emitted.
    #[serde(default)]
    pub dark_mode_enabled: bool,
    /// Which utility classes are generated.
    #[serde(default)]
    pub generate_utilities: ColorUtilities,
    /// Whether the 5…90 % transparent variants are generated.
    #[serde(default = "enabled")]
    pub generate_transparent: bool,
    /// Darker variants.
    #[serde(default)]
    pub generate_shades: VariantOptions,
    /// Lighter variants.
    #[serde(default)]
    pub generate_tints: VariantOptions,
    /// Sort key.
    #[serde(default)]
    pub order: f64,
}

fn enabled() -> bool {
    true
}

/// The utility classes of a colour token.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ColorUtilities {
    /// `text-<slug>`.
    #[serde(default = "enabled")]
    pub text: bool,
    /// `bg-<slug>`.
    #[serde(default = "enabled")]
    pub background: bool,
    /// `border-<slug>`.
    #[serde(default = "enabled")]
    pub border: bool,
    /// `fill-<slug>`.
    #[serde(default)]
    pub fill: bool,
}

impl Default for ColorUtilities {
    fn default() -> Self {
        ColorUtilities {
            text: true,
            background: true,
            border: true,
            fill: false,
        }
    }
}

/// Shade or tint generation.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct VariantOptions {
    /// Whether any are generated.
    #[serde(default = "enabled")]
    pub enabled: bool,
    /// How many (clamped to 0..=12).
    #[serde(default = "four")]
    pub count: f64,
}

fn four() -> f64 {
    4.0
}

impl Default for VariantOptions {
    fn default() -> Self {
        VariantOptions {
            enabled: true,
            count: 4.0,
        }
    }
}

/// `framework.typography` or `framework.spacing`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleSettings {
    /// The scales.
    #[serde(default)]
    pub groups: Vec<ScaleGroup>,
    /// Class generators bound to groups.
    #[serde(default)]
    pub classes: Vec<ClassGenerator>,
    /// Set when the whole family is switched off.
    #[serde(default)]
    pub is_disabled: bool,
}

/// One scale. Fields the editor fills with per-family defaults stay optional here and are
/// resolved by [`scales`].
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleGroup {
    /// Its id.
    pub id: String,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// `fluid` or `fluid_manual`.
    #[serde(default)]
    pub mode: Option<String>,
    /// The variable naming pattern (`text`, `space`, or one containing `{step}`).
    #[serde(default)]
    pub naming_convention: Option<String>,
    /// Comma-separated step labels.
    #[serde(default)]
    pub steps: Option<String>,
    /// The step whose size is the base size.
    #[serde(default)]
    pub base_scale_index: Option<f64>,
    /// The scale at the smallest screen.
    pub min: ScaleEnd,
    /// The scale at the largest screen.
    pub max: ScaleEnd,
    /// The sizes of a manual scale.
    #[serde(default)]
    pub manual_sizes: Vec<ManualSize>,
    /// Set when this scale is switched off.
    #[serde(default)]
    pub is_disabled: bool,
    /// Sort key.
    #[serde(default)]
    pub order: f64,
}

/// One end of a fluid scale: the base size in px and the ratio between steps.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleEnd {
    /// Base font size (typography).
    #[serde(default)]
    pub font_size: Option<f64>,
    /// Base size (spacing).
    #[serde(default)]
    pub size: Option<f64>,
    /// A preset ratio or a number.
    #[serde(default)]
    pub scale_ratio: Option<Ratio>,
    /// When set, `scale_ratio_input_value` is the ratio.
    #[serde(default)]
    pub is_custom_scale_ratio: bool,
    /// A custom ratio.
    #[serde(default)]
    pub scale_ratio_input_value: Option<f64>,
}

/// A scale ratio as posted: a number or a preset written as text (`"1.25"`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Ratio {
    /// A number.
    Number(f64),
    /// Text read as a number.
    Text(String),
}

/// A named size of a manual scale, in px.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ManualSize {
    /// Its name, which gives the variable name.
    pub name: String,
    /// At the smallest screen.
    pub min: f64,
    /// At the largest screen.
    pub max: f64,
}

/// A class generator: a class name pattern applied to every step of one group.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClassGenerator {
    /// The pattern; `*` or `{step}` is replaced by the step, else `-<step>` is appended.
    pub name: String,
    /// The group it applies to.
    #[serde(default)]
    pub tab_id: String,
    /// Set when switched off.
    #[serde(default)]
    pub is_disabled: bool,
}

/// `framework.preferences`; missing fields take the editor's defaults.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Preferences {
    /// Divisor from px to rem.
    #[serde(default = "root_font_size")]
    pub root_font_size: f64,
    /// Where fluid scales stop shrinking, px.
    #[serde(default = "min_screen_width")]
    pub min_screen_width: f64,
    /// Where fluid scales stop growing, px.
    #[serde(default = "max_screen_width")]
    pub max_screen_width: f64,
    /// Whether sizes are written in rem (else px).
    #[serde(default = "enabled")]
    pub is_rem: bool,
}

// The editor's defaults: a 10 px root makes rem values read as px / 10.
fn root_font_size() -> f64 {
    10.0
}
fn min_screen_width() -> f64 {
    320.0
}
fn max_screen_width() -> f64 {
    1400.0
}

impl Default for Preferences {
    fn default() -> Self {
        Preferences {
            root_font_size: root_font_size(),
            min_screen_width: min_screen_width(),
            max_screen_width: max_screen_width(),
            is_rem: true,
        }
    }
}

/// `settings.fonts`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct FontSettings {
    /// The installed families.
    #[serde(default)]
    pub items: Vec<FontEntry>,
    /// The font tokens.
    #[serde(default)]
    pub tokens: Vec<FontToken>,
}

/// An installed family.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct FontEntry {
    /// Its id.
    pub id: String,
    /// The family name.
    pub family: String,
}

/// A font token.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FontToken {
    /// Its display name.
    pub name: String,
    /// The variable slug (`font-body`), normalised into `--font-<…>`.
    pub variable: String,
    /// The installed family it uses, if any.
    #[serde(default)]
    pub family_id: Option<String>,
    /// The fallback stack.
    #[serde(default)]
    pub fallback: Option<String>,
    /// Sort key.
    #[serde(default)]
    pub order: f64,
}

// === The digest ===

/// Every token of the site with the variable and classes that reference it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TokenDigest {
    /// Colours with their variants.
    pub colors: Vec<ColorDescriptor>,
    /// Type scales.
    pub typography: Vec<ScaleGroupDescriptor>,
    /// Spacing scales.
    pub spacing: Vec<ScaleGroupDescriptor>,
    /// Font tokens.
    pub fonts: Vec<FontDescriptor>,
}

/// A colour token.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ColorDescriptor {
    /// The normalised slug.
    pub slug: String,
    /// Its category.
    pub category: String,
    /// `--<slug>`.
    pub css_var: String,
    /// `var(--<slug>)`.
    #[serde(rename = "ref")]
    pub reference: String,
    /// The light value, as the stylesheet writes it.
    pub value: String,
    /// Classes bound to it.
    pub utility_classes: Vec<String>,
    /// The dark value, when dark mode is on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dark_value: Option<String>,
    /// Transparent, shade and tint variants.
    pub variants: Vec<ColorVariantDescriptor>,
}

/// A generated colour variant.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ColorVariantDescriptor {
    /// `d-1` (shade), `l-2` (tint) or `30` (transparent).
    pub variant: String,
    /// `--<slug>-<variant>`.
    pub css_var: String,
    /// `var(--<slug>-<variant>)`.
    #[serde(rename = "ref")]
    pub reference: String,
    /// Its light value.
    pub value: String,
    /// Classes bound to it.
    pub utility_classes: Vec<String>,
}

/// A type or spacing scale.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleGroupDescriptor {
    /// The group id.
    pub id: String,
    /// `typography` or `spacing`.
    pub family: &'static str,
    /// The group name.
    pub name: String,
    /// The naming convention as set on the group.
    pub naming_convention: String,
    /// Its steps.
    pub steps: Vec<ScaleStepDescriptor>,
}

/// One step of a scale.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleStepDescriptor {
    /// The step label (`m`, `2xl`).
    pub step: String,
    /// Its variable.
    pub css_var: String,
    /// `var(<css_var>)`.
    #[serde(rename = "ref")]
    pub reference: String,
    /// Its `clamp(…)` value.
    pub value: String,
    /// Classes bound to it.
    pub utility_classes: Vec<String>,
}

/// A font token.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FontDescriptor {
    /// Its name.
    pub name: String,
    /// `--font-<…>`.
    pub css_var: String,
    /// `var(--font-<…>)`.
    #[serde(rename = "ref")]
    pub reference: String,
    /// The installed family, or empty for a fallback-only token.
    pub family: String,
    /// The whole `font-family` value.
    pub stack: String,
}

/// One family of the digest, as `site_list_tokens` narrows to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenFamily {
    /// Colours.
    Colors,
    /// Type scales.
    Typography,
    /// Spacing scales.
    Spacing,
    /// Fonts.
    Fonts,
}

impl TokenFamily {
    /// The family named `name` in a tool input.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "colors" => Some(TokenFamily::Colors),
            "typography" => Some(TokenFamily::Typography),
            "spacing" => Some(TokenFamily::Spacing),
            "fonts" => Some(TokenFamily::Fonts),
            _ => None,
        }
    }
}

// === impl TokenDigest ===

impl TokenDigest {
    /// Returns true if and only if the site has no token at all.
    pub fn is_empty(&self) -> bool {
        self.colors.is_empty()
            && self.typography.is_empty()
            && self.spacing.is_empty()
            && self.fonts.is_empty()
    }

    /// Only `family`, the others emptied so the shape stays the same; everything without one.
    pub fn only(mut self, family: Option<TokenFamily>) -> Self {
        let Some(family) = family else {
            return self;
        };
        if family != TokenFamily::Colors {
            self.colors.clear();
        }
        if family != TokenFamily::Typography {
            self.typography.clear();
        }
        if family != TokenFamily::Spacing {
            self.spacing.clear();
        }
        if family != TokenFamily::Fonts {
            self.fonts.clear();
        }
        self
    }
}

/// The digest of a site's settings.
pub fn describe(settings: &SiteSettings) -> TokenDigest {
    let mut digest = TokenDigest::default();
    if let Some(framework) = &settings.framework {
        let preferences = framework.preferences.clone().unwrap_or_default();
        digest.colors = colors::describe(&framework.colors);
        digest.typography = scales::describe(
            scales::Family::Typography,
            framework.typography.as_ref(),
            &preferences,
        );
        digest.spacing = scales::describe(
            scales::Family::Spacing,
            framework.spacing.as_ref(),
            &preferences,
        );
    }
    if let Some(fonts) = &settings.fonts {
        digest.fonts = fonts::describe(fonts);
    }
    digest
}

// === Numbers and ordering as the editor's JavaScript has them ===

/// `x` printed the way JavaScript's `String(x)` prints it, for the magnitudes CSS values have.
pub(crate) fn js_string(x: f64) -> String {
    if x == 0.0 {
        // JavaScript prints negative zero as "0".
        return "0".to_owned();
    }
    if x.is_nan() {
        return "NaN".to_owned();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    format!("{x}")
}

/// JavaScript's `Math.round`: halves go towards positive infinity.
pub(crate) fn js_round(x: f64) -> f64 {
    let floor = x.floor();
    if x - floor >= 0.5 {
        floor + 1.0
    } else {
        floor
    }
}

/// `Number(x.toFixed(2))`: the nearest hundredth, exact halves away from zero.
pub(crate) fn to_fixed2(x: f64) -> f64 {
    if !x.is_finite() {
        return x;
    }
    // A value exactly halfway between two hundredths is an odd multiple of 1/8 (the only
    // such binary fractions); toFixed takes the larger magnitude there, while Rust's
    // formatter takes the even one.
    let eighths = x * 8.0;
    if eighths.fract() == 0.0 && eighths.abs() % 2.0 == 1.0 {
        return (x.abs() * 100.0).ceil().copysign(x) / 100.0;
    }
    format!("{x:.2}").parse().unwrap_or(x)
}

/// JavaScript's `Number(text)` for decimal text: blank is 0, anything else unreadable NaN.
pub(crate) fn js_number(text: &str) -> f64 {
    let text = text.trim();
    if text.is_empty() {
        return 0.0;
    }
    text.parse().unwrap_or(f64::NAN)
}

/// An approximation of the editor's `localeCompare`, used only to order tokens with the
/// same `order`: punctuation before digits before letters, letters compared without case
/// first, then lower case before upper case.
pub(crate) fn locale_cmp(a: &str, b: &str) -> Ordering {
    fn primary(c: char) -> (u8, char) {
        let rank = if c.is_alphabetic() {
            2
        } else if c.is_numeric() {
            1
        } else {
            0
        };
        (rank, c.to_lowercase().next().unwrap_or(c))
    }
    let folded = a.chars().map(primary).cmp(b.chars().map(primary));
    folded
        .then_with(|| {
            // Lower case sorts first at equal letters.
            a.chars()
                .map(|c| c.is_uppercase())
                .cmp(b.chars().map(|c| c.is_uppercase()))
        })
        .then_with(|| a.cmp(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_as_the_editor_prints_them() {
        assert_eq!(js_string(-0.0), "0");
        assert_eq!(js_string(1.6), "1.6");
        assert_eq!(js_string(16.0), "16");
        assert_eq!(to_fixed2(0.125), 0.13);
        assert_eq!(to_fixed2(-0.125), -0.13);
        assert_eq!(to_fixed2(1.005), 1.0); // 1.005 is stored just below the half
        assert_eq!(to_fixed2(2.3456), 2.35);
        assert_eq!(js_round(-2.5), -2.0);
        assert_eq!(js_round(2.5), 3.0);
        assert_eq!(js_number(" 1.25 "), 1.25);
        assert_eq!(js_number(""), 0.0);
        assert!(js_number("golden").is_nan());
    }

    #[test]
    fn ties_in_order_sort_like_the_editor() {
        assert_eq!(locale_cmp("a", "B"), Ordering::Less);
        assert_eq!(locale_cmp("a", "A"), Ordering::Less);
        assert_eq!(locale_cmp("a-b", "a1"), Ordering::Less);
        assert_eq!(locale_cmp("9", "a"), Ordering::Less);
    }
}
