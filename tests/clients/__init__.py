"""Tests of the clients: the Python client (alicia.client), the web app (alicia.web), clients/js."""
