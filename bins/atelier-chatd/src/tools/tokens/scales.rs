//! Type and spacing scales: one variable per step, named from the group's naming convention
//! (`text` gives `--text-m`; a convention containing `{step}` has the step put there), valued
//! `clamp(min, calc(<slope>vw + <intercept>), max)` between the smallest and largest screen,
//! and the classes the group's class generators bind to each step.
//!
//! A manual group names its variables after its sizes instead. Unset group fields take the
//! family's defaults: typography `text`, steps `xs…4xl` based at `m`, ratios 1.125 → 1.333;
//! spacing `space`, steps `4xs…4xl` based at `m`, ratios 1.25 → 1.414.

use std::collections::HashMap;

use super::{
    js_number, js_string, to_fixed2, ClassGenerator, Preferences, Ratio, ScaleEnd, ScaleGroup,
    ScaleGroupDescriptor, ScaleSettings, ScaleStepDescriptor,
};

/// Which scale family a group belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Font sizes.
    Typography,
    /// Spacing sizes.
    Spacing,
}

// === impl Family ===

impl Family {
    fn name(self) -> &'static str {
        match self {
            Family::Typography => "typography",
            Family::Spacing => "spacing",
        }
    }

    fn naming_convention(self) -> &'static str {
        match self {
            Family::Typography => "text",
            Family::Spacing => "space",
        }
    }

    fn steps(self) -> &'static str {
        match self {
            Family::Typography => "xs,s,m,l,xl,2xl,3xl,4xl",
            Family::Spacing => "4xs,3xs,2xs,xs,s,m,l,xl,2xl,3xl,4xl",
        }
    }

    fn base_scale_index(self) -> f64 {
        match self {
            Family::Typography => 2.0,
            Family::Spacing => 5.0,
        }
    }

    /// The default ratio at the small (`min`) or large end.
    fn ratio(self, min: bool) -> f64 {
        match (self, min) {
            (Family::Typography, true) => 1.125,
            (Family::Typography, false) => 1.333,
            (Family::Spacing, true) => 1.25,
            (Family::Spacing, false) => 1.414,
        }
    }

    /// The base size of one end: `fontSize` for type, `size` for spacing.
    fn base_size(self, end: &ScaleEnd) -> f64 {
        match self {
            Family::Typography => end.font_size,
            Family::Spacing => end.size,
        }
        .unwrap_or(f64::NAN)
    }
}

/// One generated variable.
struct Variable {
    name: String,
    value: String,
    step: String,
}

/// One step of a fluid scale, sizes in px already rounded to hundredths.
struct FluidStep {
    min: f64,
    max: f64,
    slope_vw: f64,
    intercept: f64,
}

/// The scale descriptors of `settings`, groups in `order`, disabled ones left out.
pub fn describe(
    family: Family,
    settings: Option<&ScaleSettings>,
    preferences: &Preferences,
) -> Vec<ScaleGroupDescriptor> {
    let Some(settings) = settings.filter(|s| !s.is_disabled) else {
        return Vec::new();
    };
    let mut groups: Vec<&ScaleGroup> = settings.groups.iter().filter(|g| !g.is_disabled).collect();
    groups.sort_by(|a, b| {
        a.order
            .partial_cmp(&b.order)
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let classes = class_names(family, &groups, &settings.classes);
    let mut out = Vec::new();
    for group in groups {
        let labels = step_labels(group, family);
        let variables = if group.mode.as_deref() == Some("fluid_manual") {
            manual_variables(group, &labels, preferences)
        } else {
            fluid_variables(family, group, &labels, preferences)
        };
        if variables.is_empty() {
            continue;
        }
        let steps = variables
            .into_iter()
            .map(|v| ScaleStepDescriptor {
                utility_classes: classes
                    .get(&(group.id.clone(), v.step.clone()))
                    .cloned()
                    .unwrap_or_default(),
                reference: format!("var({})", v.name),
                css_var: v.name,
                value: v.value,
                step: v.step,
            })
            .collect();
        out.push(ScaleGroupDescriptor {
            id: group.id.clone(),
            family: family.name(),
            name: group.name.clone(),
            naming_convention: group
                .naming_convention
                .clone()
                .unwrap_or_else(|| family.naming_convention().to_owned()),
            steps,
        });
    }
    out
}

fn step_labels(group: &ScaleGroup, family: Family) -> Vec<String> {
    group
        .steps
        .as_deref()
        .unwrap_or(family.steps())
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The variable of a step: the convention with `{step}` replaced (first occurrence), or
/// `<convention>-<step>`; whitespace in the convention becomes `-`.
pub fn variable_name(convention: &str, step: &str) -> String {
    let dashed = |text: &str| -> String {
        text.chars()
            .map(|c| if c.is_whitespace() { '-' } else { c })
            .collect()
    };
    if convention.contains("{step}") {
        format!("--{}", dashed(&convention.replacen("{step}", step, 1)))
    } else {
        format!("--{}-{step}", dashed(convention))
    }
}

/// The variable of a manual size: whitespace runs as `-`, anything but `A-Za-z0-9-_`
/// dropped (`size` when nothing is left), `--` in front, camel case split and lowered.
pub fn manual_variable_name(size_name: &str) -> String {
    let mut safe = String::new();
    let mut in_space = false;
    for c in size_name.chars() {
        if c.is_whitespace() {
            if !in_space {
                safe.push('-');
            }
            in_space = true;
            continue;
        }
        in_space = false;
        if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
            safe.push(c);
        }
    }
    if safe.is_empty() {
        safe = "size".to_owned();
    }
    let prefixed = if safe.starts_with("--") {
        safe
    } else {
        format!("--{safe}")
    };
    let mut out = String::with_capacity(prefixed.len() + 4);
    let mut previous_lower = false;
    for c in prefixed.chars() {
        if previous_lower && c.is_ascii_uppercase() {
            out.push('-');
        }
        previous_lower = c.is_ascii_lowercase();
        out.extend(c.to_lowercase());
    }
    out
}

fn ratio(end: &ScaleEnd, default: f64) -> f64 {
    if end.is_custom_scale_ratio {
        if let Some(value) = end.scale_ratio_input_value {
            return value;
        }
    }
    match &end.scale_ratio {
        None => default,
        Some(Ratio::Number(n)) => *n,
        Some(Ratio::Text(text)) => js_number(text),
    }
}

#[expect(
    clippy::too_many_arguments,
    reason = "the scale's inputs are all plain numbers, named at the one call site each"
)]
fn fluid_steps(
    min_base: f64,
    max_base: f64,
    min_ratio: f64,
    max_ratio: f64,
    steps: usize,
    base_index: f64,
    min_screen: f64,
    max_screen: f64,
) -> Vec<FluidStep> {
    (0..steps)
        .map(|index| {
            // Step counts are small; the conversion is exact.
            let i = index as f64 - base_index;
            let min_size = min_base * min_ratio.powf(i);
            let max_size = max_base * max_ratio.powf(i);
            let slope = (max_size - min_size) / (max_screen - min_screen);
            let intercept = min_size - slope * min_screen;
            FluidStep {
                min: to_fixed2(min_size),
                max: to_fixed2(max_size),
                slope_vw: to_fixed2(slope * 100.0),
                intercept: to_fixed2(intercept),
            }
        })
        .collect()
}

/// `clamp(min, calc(<slope>vw + <intercept>), max)` in rem or px.
fn declaration(step: &FluidStep, preferences: &Preferences) -> String {
    let unit = |px: f64| -> String {
        if preferences.is_rem {
            format!(
                "{}rem",
                js_string(to_fixed2(px / preferences.root_font_size))
            )
        } else {
            format!("{}px", js_string(px))
        }
    };
    format!(
        "clamp({}, calc({}vw + {}), {})",
        unit(step.min),
        js_string(step.slope_vw),
        unit(step.intercept),
        unit(step.max)
    )
}

fn fluid_variables(
    family: Family,
    group: &ScaleGroup,
    labels: &[String],
    preferences: &Preferences,
) -> Vec<Variable> {
    let convention = group
        .naming_convention
        .as_deref()
        .unwrap_or(family.naming_convention());
    let steps = fluid_steps(
        family.base_size(&group.min),
        family.base_size(&group.max),
        ratio(&group.min, family.ratio(true)),
        ratio(&group.max, family.ratio(false)),
        labels.len(),
        group.base_scale_index.unwrap_or(family.base_scale_index()),
        preferences.min_screen_width,
        preferences.max_screen_width,
    );
    steps
        .iter()
        .zip(labels)
        .map(|(step, label)| Variable {
            name: variable_name(convention, label),
            value: declaration(step, preferences),
            step: label.clone(),
        })
        .collect()
}

fn manual_variables(
    group: &ScaleGroup,
    labels: &[String],
    preferences: &Preferences,
) -> Vec<Variable> {
    group
        .manual_sizes
        .iter()
        .enumerate()
        .filter_map(|(index, size)| {
            let step = fluid_steps(
                size.min,
                size.max,
                1.0,
                1.0,
                1,
                0.0,
                preferences.min_screen_width,
                preferences.max_screen_width,
            )
            .pop()?;
            Some(Variable {
                name: manual_variable_name(&size.name),
                value: declaration(&step, preferences),
                step: labels
                    .get(index)
                    .cloned()
                    .unwrap_or_else(|| size.name.clone()),
            })
        })
        .collect()
}

/// A class generator's class for `step`: the pattern without a leading `.`, with `*` (or
/// else `{step}`) replaced, or `-<step>` appended; `None` for an empty pattern.
pub fn expand_class_pattern(pattern: &str, step: &str) -> Option<String> {
    let trimmed = pattern.trim();
    let trimmed = trimmed.strip_prefix('.').unwrap_or(trimmed);
    if trimmed.is_empty() {
        None
    } else if trimmed.contains('*') {
        Some(trimmed.replace('*', step))
    } else if trimmed.contains("{step}") {
        Some(trimmed.replace("{step}", step))
    } else {
        Some(format!("{trimmed}-{step}"))
    }
}

/// The generated class names of every (group id, step), in generator order.
fn class_names(
    family: Family,
    groups: &[&ScaleGroup],
    generators: &[ClassGenerator],
) -> HashMap<(String, String), Vec<String>> {
    let by_id: HashMap<&str, &ScaleGroup> = groups.iter().map(|g| (g.id.as_str(), *g)).collect();
    let mut out: HashMap<(String, String), Vec<String>> = HashMap::new();
    for generator in generators {
        if generator.is_disabled || generator.tab_id.is_empty() {
            continue;
        }
        let Some(group) = by_id.get(generator.tab_id.as_str()) else {
            continue;
        };
        for step in step_labels(group, family) {
            if let Some(class) = expand_class_pattern(&generator.name, &step) {
                out.entry((group.id.clone(), step)).or_default().push(class);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_convention() {
        assert_eq!(variable_name("text", "m"), "--text-m");
        assert_eq!(variable_name("fs {step} x", "l"), "--fs-l-x");
        assert_eq!(variable_name("big text", "2xl"), "--big-text-2xl");
        assert_eq!(manual_variable_name("heroTitle  big"), "--hero-title-big");
        assert_eq!(manual_variable_name("%%"), "--size");
        assert_eq!(
            expand_class_pattern(".text-*", "m").as_deref(),
            Some("text-m")
        );
        assert_eq!(
            expand_class_pattern("p-{step}", "s").as_deref(),
            Some("p-s")
        );
        assert_eq!(expand_class_pattern("gap", "xl").as_deref(), Some("gap-xl"));
        assert_eq!(expand_class_pattern(" . ", "xl"), None);
    }

    #[test]
    fn a_fluid_step_clamps_between_the_screen_widths() {
        // 16 px at 320 px to 20 px at 1400 px, one step at the base.
        let steps = fluid_steps(16.0, 20.0, 1.2, 1.25, 1, 0.0, 320.0, 1400.0);
        let value = declaration(&steps[0], &Preferences::default());
        assert_eq!(value, "clamp(1.6rem, calc(0.37vw + 1.48rem), 2rem)");
        let px = Preferences {
            is_rem: false,
            ..Preferences::default()
        };
        assert_eq!(
            declaration(&steps[0], &px),
            "clamp(16px, calc(0.37vw + 14.81px), 20px)"
        );
    }
}
