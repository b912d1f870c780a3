//! A URL as errors and logs may show it.

/// `url` with the password of its user, if any, replaced by `***`: `postgres://app:***@db/x`.
pub(crate) fn masked(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let Some((user_info, host)) = authority.rsplit_once('@') else {
        return url.to_owned();
    };
    match user_info.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***@{host}{path}"),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_is_masked_and_nothing_else() {
        let cases = [
            (
                "postgres://app:s3cret@db:5432/x",
                "postgres://app:***@db:5432/x",
            ),
            ("redis://:s3cret@cache/0", "redis://:***@cache/0"),
            (
                "mysql://p%40ss:w@rd:x@h/db?ssl-mode=REQUIRED",
                "mysql://p%40ss:***@h/db?ssl-mode=REQUIRED",
            ),
            (
                "postgres://root@127.0.0.1/test",
                "postgres://root@127.0.0.1/test",
            ),
            (
                "redis://127.0.0.1:6379/?name=a@b",
                "redis://127.0.0.1:6379/?name=a@b",
            ),
            ("127.0.0.1:2181", "127.0.0.1:2181"),
        ];
        for (url, shown) in cases {
            assert_eq!(masked(url), shown, "{url}");
        }
    }
}
