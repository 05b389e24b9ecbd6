//! The documents generated from the code and committed beside it, so that a reader (and a
//! platform team's tooling) has them without building onecharge: the message schemas
//! (`docs/schemas/*.json`, `crate::documents::schemas`), the admin API's OpenAPI document
//! (`docs/openapi.json`, `crate::http::openapi`) and the man pages (`docs/onecharge.1` and
//! one per subcommand under `docs/man/`, from the clap definitions). A unit test fails when a committed file is not what the code
//! generates; `UPDATE_DOCS=1 cargo test --lib documents` rewrites them all.

pub mod schemas;

use std::path::PathBuf;

/// Every generated document, as (path from the repository's root, contents).
pub fn documents() -> Vec<(PathBuf, Vec<u8>)> {
    let mut documents: Vec<(PathBuf, Vec<u8>)> = crate::documents::schemas::all()
        .into_iter()
        .map(|(name, schema)| {
            (
                PathBuf::from(crate::documents::schemas::DIRECTORY).join(name),
                pretty(&schema),
            )
        })
        .collect();
    documents.push((
        PathBuf::from("docs/openapi.json"),
        pretty(&crate::http::openapi::document()),
    ));
    documents.push((PathBuf::from("docs/onecharge.1"), crate::cli::man_page()));
    documents.extend(
        crate::cli::subcommand_pages()
            .into_iter()
            .map(|(name, page)| (PathBuf::from(crate::cli::MAN_DIRECTORY).join(name), page)),
    );
    documents
}

/// Two-space indented JSON with a final newline: what an editor leaves, so a diff is small.
fn pretty(value: &impl serde::Serialize) -> Vec<u8> {
    let mut text = serde_json::to_vec_pretty(value).expect("a document serialises");
    text.push(b'\n');
    text
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn every_generated_document_is_committed_as_the_code_generates_it() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let update = std::env::var("UPDATE_DOCS").is_ok_and(|v| v == "1");
        let documents = documents();
        let mut stale = Vec::new();
        for (path, contents) in &documents {
            let file = root.join(path);
            let committed = std::fs::read(&file).unwrap_or_default();
            if committed == *contents {
                continue;
            }
            if update {
                std::fs::create_dir_all(file.parent().expect("a folder")).unwrap();
                std::fs::write(&file, contents).unwrap();
            } else {
                stale.push(path.display().to_string());
            }
        }
        // A schema or a man page the code no longer generates must not stay published.
        let expected: Vec<_> = documents.iter().map(|(path, _)| root.join(path)).collect();
        let folders = [
            crate::documents::schemas::DIRECTORY,
            crate::cli::MAN_DIRECTORY,
        ];
        for entry in folders
            .iter()
            .flat_map(|folder| std::fs::read_dir(root.join(folder)).into_iter().flatten())
        {
            let file = entry.unwrap().path();
            if !expected.contains(&file) {
                if update {
                    std::fs::remove_file(&file).unwrap();
                } else {
                    stale.push(format!("{} (no longer generated)", file.display()));
                }
            }
        }
        assert!(
            stale.is_empty(),
            "not as the code generates them: {stale:?}; regenerate with `UPDATE_DOCS=1 cargo test --lib documents` and commit the result"
        );
    }
}
