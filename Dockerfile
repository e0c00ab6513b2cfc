# One image for the worker, the web page, the migrations and the demo model
# (see docker-compose.yml). The web bundle is built with the locked npm packages.
FROM node:20-bookworm-slim AS web
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY web/frontend web/frontend
RUN npm run build

FROM python:3.11-slim-bookworm
ENV PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY pyproject.toml README.md alembic.ini ./
COPY protocol protocol
COPY agent agent
COPY harness harness
COPY client client
COPY web web
COPY demo demo
COPY migrations migrations
COPY config config
COPY tests/streams tests/streams
COPY --from=web /src/web/static/dist web/static/dist
# Editable: the code runs from /app, next to its static files and recorded streams.
RUN pip install --no-cache-dir -e ".[agent]" && useradd --create-home alicia
USER alicia
CMD ["python", "-m", "alicia.agent", "start"]
