//! A leg as written in the leg list: `PATH[=ATTR[,ATTR...]]`, mergerfs's `PATH=MODE` style.
//!
//! Attributes: `rot` / `nonrot` (override the rotational flag found in sysfs), `writemostly`
//! (md's write-mostly: gets every write, is read only when no other in-sync leg can serve),
//! `quiet` (as write-mostly, and lookups, listings and attributes leave it alone too: its disk
//! sees only writes while another in-sync leg can answer), and `name=LABEL` (the leg's name in
//! the stats and in `read_policy=leg:LABEL`).

/// What the user said about one leg.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LegSpec {
    /// The path as written (without the attributes).
    pub path: String,
    /// `Some(true)` for `=rot`, `Some(false)` for `=nonrot`.
    pub rotational: Option<bool>,
    pub writemostly: bool,
    pub quiet: bool,
    pub name: Option<String>,
}

/// Whether `name` is acceptable as a leg name: short, and safe in JSON, tables and options.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

impl LegSpec {
    /// The leg's name when it is in slot `slot`: `name=LABEL`, else `legN`.
    pub fn name_at(&self, slot: usize) -> String {
        self.name.clone().unwrap_or_else(|| format!("leg{slot}"))
    }

    /// Parses one leg. A path that itself contains `=` is taken whole when it names an
    /// existing directory.
    pub fn parse(s: &str) -> Result<LegSpec, String> {
        let (path, attrs) = match s.split_once('=') {
            Some(_) if std::path::Path::new(s).is_dir() => (s, None),
            Some((p, a)) => (p, Some(a)),
            None => (s, None),
        };
        let mut spec = LegSpec {
            path: path.to_string(),
            ..Default::default()
        };
        let Some(attrs) = attrs else {
            return Ok(spec);
        };
        for a in attrs.split(',') {
            match a.split_once('=') {
                None if a == "rot" || a == "nonrot" => {
                    if spec.rotational.is_some() {
                        return Err(format!("leg '{s}': 'rot' and 'nonrot' given together"));
                    }
                    spec.rotational = Some(a == "rot");
                }
                None if a == "writemostly" => spec.writemostly = true,
                None if a == "quiet" => spec.quiet = true,
                Some(("name", n)) if valid_name(n) => spec.name = Some(n.to_string()),
                Some(("name", n)) => {
                    return Err(format!(
                        "leg '{s}': invalid name '{n}' (letters, digits, '.', '_', '-'; at most 32)"
                    ))
                }
                _ => {
                    return Err(format!(
                        "leg '{s}': unknown attribute '{a}' (valid: rot, nonrot, writemostly, quiet, name=LABEL)"
                    ))
                }
            }
        }
        Ok(spec)
    }
}

/// Parses `LEG[:LEG...]`, checking that names are unique (a leg without a name is `legN`).
pub fn parse_list(list: &str) -> Result<Vec<LegSpec>, String> {
    let specs = list
        .split(':')
        .map(|s| {
            if s.is_empty() {
                Err(format!("empty leg in '{list}'"))
            } else {
                LegSpec::parse(s)
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let names: Vec<String> = specs
        .iter()
        .enumerate()
        .map(|(i, s)| s.name_at(i))
        .collect();
    for (i, n) in names.iter().enumerate() {
        if names[..i].contains(n) {
            return Err(format!("leg name '{n}' is used twice"));
        }
    }
    Ok(specs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_parse_and_mistakes_are_named() {
        let s = LegSpec::parse("/mnt/usb=rot,writemostly,name=usb").unwrap();
        assert_eq!(s.path, "/mnt/usb");
        assert_eq!(s.rotational, Some(true));
        assert!(s.writemostly);
        assert!(!s.quiet);
        assert!(LegSpec::parse("/mnt/hdd=quiet").unwrap().quiet);
        assert_eq!(s.name.as_deref(), Some("usb"));
        assert_eq!(
            LegSpec::parse("/mnt/ssd=nonrot").unwrap().rotational,
            Some(false)
        );
        assert_eq!(LegSpec::parse("/a").unwrap().path, "/a");
        let e = LegSpec::parse("/a=fast").unwrap_err();
        assert!(e.contains("unknown attribute 'fast'"), "{e}");
        assert!(LegSpec::parse("/a=rot,nonrot").is_err());
        assert!(LegSpec::parse("/a=name=").is_err());
        assert!(LegSpec::parse("/a=name=a b").is_err());
        let e = parse_list("/a=name=x:/b=name=x").unwrap_err();
        assert!(e.contains("'x' is used twice"), "{e}");
        let e = parse_list("/a:/b=name=leg0").unwrap_err();
        assert!(e.contains("'leg0' is used twice"), "{e}");
        assert_eq!(parse_list("/a:/b").unwrap().len(), 2);
    }
}
