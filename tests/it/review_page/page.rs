//! A browser-like HTTP client for the review page that keeps the session cookie by hand
//! and never follows redirects, so tests see every `303` and `Set-Cookie`.

use reqwest::header::{HeaderMap, LOCATION, SET_COOKIE};
use reqwest::StatusCode;

use crate::support::admin::{http_client, AdminServer};

/// One response, read whole.
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub text: String,
}

impl Answer {
    async fn read(response: reqwest::Response) -> Answer {
        Answer {
            status: response.status(),
            headers: response.headers().clone(),
            text: response.text().await.unwrap(),
        }
    }

    /// The `Location` header, or "".
    pub fn location(&self) -> &str {
        self.headers
            .get(LOCATION)
            .map_or("", |v| v.to_str().unwrap())
    }

    /// The `Set-Cookie` header, or "".
    pub fn set_cookie(&self) -> &str {
        self.headers
            .get(SET_COOKIE)
            .map_or("", |v| v.to_str().unwrap())
    }

    /// The value of the hidden CSRF field on this page.
    pub fn csrf(&self) -> String {
        let marker = "name=\"csrf\" value=\"";
        let start = self.text.find(marker).expect("a csrf field") + marker.len();
        let end = self.text[start..].find('"').unwrap();
        self.text[start..start + end].to_owned()
    }
}

/// A client of the review page, signed in or not.
pub struct Page {
    client: reqwest::Client,
    base: String,
    cookie: Option<String>,
}

impl Page {
    /// A client without a session.
    pub fn anonymous(server: &AdminServer) -> Page {
        Page {
            client: http_client(),
            base: server.base.clone(),
            cookie: None,
        }
    }

    /// A client signed in with `token`.
    pub async fn sign_in(server: &AdminServer, token: &str) -> Page {
        let mut page = Page::anonymous(server);
        let a = page.post("/review/login", &[("token", token)]).await;
        assert_eq!((a.status, a.location()), (StatusCode::SEE_OTHER, "/review"));
        page.cookie = Some(a.set_cookie().split(';').next().unwrap().to_owned());
        page
    }

    fn with_cookie(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.cookie {
            Some(cookie) => req.header("cookie", cookie),
            None => req,
        }
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Answer {
        let req = self.with_cookie(self.client.get(format!("{}{path}", self.base)));
        Answer::read(req.send().await.unwrap()).await
    }

    /// `POST path` with a form body.
    pub async fn post(&self, path: &str, form: &[(&str, &str)]) -> Answer {
        let req = self.client.post(format!("{}{path}", self.base)).form(form);
        Answer::read(self.with_cookie(req).send().await.unwrap()).await
    }

    /// `POST path` with a form body and extra headers.
    pub async fn post_with(
        &self,
        path: &str,
        form: &[(&str, &str)],
        header: (&str, &str),
    ) -> Answer {
        let req = self
            .client
            .post(format!("{}{path}", self.base))
            .form(form)
            .header(header.0, header.1);
        Answer::read(self.with_cookie(req).send().await.unwrap()).await
    }
}
